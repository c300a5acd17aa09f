"""A tiny decoder-only transformer (a stack of identical blocks in an nn.ModuleList), its token batches,
and a measure of the activations a forward keeps for backward: the model of the activation
checkpointing and regional compilation tests (one process and two)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32
WIDTH = 16
LENGTH = 12
GLOBAL_BATCH = 8


class Block(nn.Module):
    """Pre-norm causal self-attention (one head) and an MLP, each a residual branch."""

    def __init__(self, width: int = WIDTH, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return x + self.drop(self.down(F.gelu(self.up(self.norm2(x)))))


class TinyTransformer(nn.Module):
    """Token embedding, `layers` identical blocks, a final norm and the output head."""

    def __init__(self, layers: int = 4, width: int = WIDTH, dropout: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.blocks = nn.ModuleList([Block(width, dropout) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def make_transformer(seed: int = 0, **options: int | float) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer(**options)  # type: ignore[arg-type]


def token_batch(step: int, rank: int = 0, world: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s global batch of token sequences (inputs, next-token targets), or process `rank`'s part."""
    generator = torch.Generator().manual_seed(100 + step)
    tokens = torch.randint(0, VOCAB, (GLOBAL_BATCH, LENGTH + 1), generator=generator)
    part = GLOBAL_BATCH // world
    tokens = tokens[rank * part:(rank + 1) * part]
    return tokens[:, :-1], tokens[:, 1:]


def loss_of(model: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(inputs).float()
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def saved_bytes(forward: Callable[[], torch.Tensor]) -> tuple[int, torch.Tensor]:
    """The bytes of the tensors autograd keeps for backward while `forward()` runs, and its result.

    Activation checkpointing installs its own hooks inside each checkpointed block, so what this
    counts is what stays in memory until backward (a tensor saved twice counts twice)."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = forward()
    return total, result


def train(accelerator: object, model: nn.Module, steps: int = 3) -> dict[str, object]:
    """`steps` SGD steps of `model` prepared by `accelerator` on this process's part of each batch (SGD: the
    weights move by the gradients themselves; Adam would turn a gradient of rounding noise, such as the
    attention keys' bias has, into a full step of either sign).

    Returns the losses, the bytes the first forward kept for backward, the first step's gradients
    (by parameter name; None for sharded parameters) and the final weights of the whole model."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared, optimizer = accelerator.prepare(model, optimizer)  # type: ignore[attr-defined]
    rank, world = accelerator.process_index, accelerator.num_processes  # type: ignore[attr-defined]
    losses, kept, gradients = [], 0, {}
    for step in range(steps):
        inputs, targets = token_batch(step, rank, world)
        saved, loss = saved_bytes(lambda inputs=inputs, targets=targets: loss_of(prepared, inputs, targets))
        accelerator.backward(loss)  # type: ignore[attr-defined]
        if step == 0:
            kept = saved
            gradients = {name: _plain(p.grad) for name, p in accelerator.unwrap_model(prepared).named_parameters()}  # type: ignore[attr-defined]
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    weights = accelerator.get_state_dict(prepared)  # type: ignore[attr-defined]  # every process takes part
    return {"losses": losses, "saved_bytes": kept, "gradients": gradients,
            "weights": {name: t.float().tolist() for name, t in weights.items()}, "model": prepared}


def _plain(gradient: torch.Tensor | None) -> list | None:
    if gradient is None or type(gradient) is not torch.Tensor:  # a DTensor shard: compared through the weights
        return None
    return gradient.float().tolist()
