"""A tiny residual-MLP model and a tiny Llama (transformers, built from a config), their data, a plan, and the
one-process training loop the tensor-parallel runs are compared with (each launched rank runs it itself)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

GLOBAL_BATCH = 8
WIDTH = 16
STEPS = 4
MAX_NORM = 0.5
PLAN = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}
"""The MLP's plan: each block's first layer split by output columns, its second by input rows."""


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, WIDTH)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(WIDTH, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_mlp(seed: int = 0) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet()


def make_llama(seed: int = 0, heads: int = 4, kv_heads: int = 2, tied: bool = False) -> nn.Module:
    """A 2-layer Llama of hidden size 32 built from its config (nothing downloaded); it carries its own tp_plan.
    `tied`: its output layer shares the embedding's weight."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, vocab_size=64, max_position_embeddings=32,
                         tie_word_embeddings=tied)
    return LlamaForCausalLM(config)


def mlp_batch(step: int, part: int = 0, parts: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s global batch, or data-parallel part `part` of `parts` of it."""
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, 8, generator=generator)
    y = torch.randn(GLOBAL_BATCH, 4, generator=generator)
    size = GLOBAL_BATCH // parts
    return x[part * size:(part + 1) * size], y[part * size:(part + 1) * size]


def llama_batch(step: int, part: int = 0, parts: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(2000 + step)
    ids = torch.randint(0, 64, (GLOBAL_BATCH, 12), generator=generator)
    size = GLOBAL_BATCH // parts
    return ids[part * size:(part + 1) * size]


def loss_of(kind: str, model: nn.Module, data: Any) -> torch.Tensor:
    if kind != "mlp":
        return model(input_ids=data, labels=data).loss
    x, y = data
    return torch.nn.functional.mse_loss(model(x), y)


def make(kind: str) -> nn.Module:
    """kind: "mlp", "llama", or "tied" (the Llama with tied embeddings)."""
    return make_mlp() if kind == "mlp" else make_llama(tied=kind == "tied")


def data(kind: str, step: int, part: int = 0, parts: int = 1) -> Any:
    return mlp_batch(step, part, parts) if kind == "mlp" else llama_batch(step, part, parts)


def train_reference(kind: str) -> dict[str, Any]:
    """One process, the global batch: losses, gradient norms (before clipping) and the final weights."""
    model = make(kind)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses, norms = [], []
    for step in range(STEPS):
        loss = loss_of(kind, model, data(kind, step))
        loss.backward()
        norms.append(nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM).item())
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return {"losses": losses, "norms": norms, "weights": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
