"""A small GPT-style character language model and its data: `accel bench`'s default model and
the model of the examples (examples/gpt.py re-exports this module, so there is one copy).

Importing this module has no side effects: it defines the model (`GPT`, configured by
`GPTConfig`), a character vocabulary, a corpus builder and `CharDataset`.

The corpus is the source code of a fixed list of standard-library modules, so nothing is
downloaded and the text is identical for a given Python version. Where a Python
installation ships without module sources, a deterministic generated corpus is used instead.

Every `nn.Linear` has in/out features that are multiples of 16, so that FP8 backends can
convert all of them (FP8 GEMMs need dimensions divisible by 16).
"""

from __future__ import annotations

import importlib
import inspect
import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

__all__ = [
    "GPT",
    "VOCAB",
    "CharDataset",
    "GPTConfig",
    "build_corpus",
    "build_datasets",
    "decode",
    "encode",
    "generated_corpus",
]

# One newline plus the 95 printable ASCII characters: 96 symbols, a multiple of 16, and the
# same on every Python version. Characters outside it are mapped to UNKNOWN.
VOCAB: str = "\n" + "".join(chr(c) for c in range(32, 127))
UNKNOWN: str = "?"
_INDEX: dict[str, int] = {ch: i for i, ch in enumerate(VOCAB)}

# Standard-library modules whose source forms the corpus (about 380k characters).
CORPUS_MODULES: tuple[str, ...] = (
    "textwrap",
    "string",
    "difflib",
    "argparse",
    "heapq",
    "bisect",
    "functools",
    "dataclasses",
    "calendar",
    "csv",
)


# --------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPTConfig:
    """Shape of a `GPT` model.

    The defaults (about 0.8M parameters) train to a visibly falling loss within a minute
    on a 2-core CPU. `vocab_size` and `n_embd` must be multiples of 16 so that every
    Linear layer is FP8-convertible.
    """

    vocab_size: int = len(VOCAB)
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_embd"):
            value = getattr(self, name)
            if value <= 0 or value % 16:
                raise ValueError(f"GPTConfig.{name}={value} must be a positive multiple of 16")
        if self.n_head <= 0 or self.n_embd % self.n_head:
            raise ValueError(
                f"GPTConfig.n_embd={self.n_embd} must be divisible by n_head={self.n_head}"
            )
        if self.block_size <= 0 or self.n_layer <= 0:
            raise ValueError("GPTConfig.block_size and n_layer must be positive")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig.dropout={self.dropout} must be in [0, 1)")


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which each position sees only itself and earlier ones."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over `x` of shape (batch, time, n_embd); returns the same shape."""
        batch, time, channels = x.shape
        q, k, v = self.qkv(x).split(channels, dim=2)
        # (batch, time, channels) -> (batch, heads, time, head_dim)
        q, k, v = (t.view(batch, time, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        y = y.transpose(1, 2).reshape(batch, time, channels)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward network: expand 4x, GELU, project back."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Transform each position of `x` independently."""
        return self.drop(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply attention and MLP with residual connections."""
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Decoder-only transformer language model.

    `forward(idx)` maps token ids of shape (batch, time) to next-token logits of shape
    (batch, time, vocab_size). The loss is left to the caller, as in an ordinary script.
    The output head is not tied to the token embedding, so that it is a plain Linear
    that precision backends may convert like any other.
    """

    _no_split_modules = ["Block"]
    """The repeated block, named as transformers models name theirs: FSDP's transformer_based_wrap
    shards one unit per Block without the class being named in the config."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise weights: N(0, 0.02), zero biases, residual projections scaled down.

        Each block adds two residual branches; scaling their output projections by
        1/sqrt(2 * n_layer) keeps the residual stream's variance independent of depth.
        """
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for block in self.blocks:
            assert isinstance(block, Block)
            nn.init.normal_(block.attn.proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.proj.weight, mean=0.0, std=residual_std)

    def num_parameters(self) -> int:
        """Number of parameters (all trainable)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Return logits (batch, time, vocab_size) for token ids `idx` (batch, time)."""
        time = idx.size(1)
        if time > self.config.block_size:
            raise ValueError(f"sequence length {time} exceeds block_size {self.config.block_size}")
        positions = torch.arange(time, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(positions))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------


def encode(text: str) -> torch.Tensor:
    """Map `text` to a 1-D int64 tensor of vocabulary indices (unknown characters -> '?')."""
    unknown = _INDEX[UNKNOWN]
    return torch.tensor([_INDEX.get(ch, unknown) for ch in text], dtype=torch.long)


def decode(ids: torch.Tensor | list[int]) -> str:
    """Map vocabulary indices back to text."""
    values = ids.tolist() if isinstance(ids, torch.Tensor) else ids
    return "".join(VOCAB[i] for i in values)


def _stdlib_corpus(modules: tuple[str, ...]) -> str:
    """Concatenate the source of `modules`; raises OSError if any source is missing."""
    return "\n\n".join(inspect.getsource(importlib.import_module(name)) for name in modules)


def generated_corpus(seed: int = 0, n_chars: int = 200_000) -> str:
    """Deterministic pseudo-English text: sentences drawn from a small word list.

    Used only where module sources are unavailable. It has enough structure (word
    frequencies, spaces, punctuation, line breaks) for the loss to fall visibly.
    """
    rng = random.Random(seed)
    words = (
        *("the", "a", "model", "learns", "to", "predict", "next", "character", "from"),
        *("text", "and", "loss", "goes", "down", "with", "each", "step", "of", "training"),
        *("on", "small", "data", "in", "mixed", "precision", "while", "gradients", "flow"),
        *("through", "layers", "of", "attention"),
    )
    parts: list[str] = []
    size = 0
    while size < n_chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
        line = sentence.capitalize() + rng.choice(".!?") + ("\n" if rng.random() < 0.3 else " ")
        parts.append(line)
        size += len(line)
    return "".join(parts)[:n_chars]


def build_corpus(modules: tuple[str, ...] = CORPUS_MODULES, seed: int = 0) -> str:
    """Return the training text: stdlib sources, or generated text if they are absent."""
    try:
        return _stdlib_corpus(modules)
    except (OSError, TypeError):
        return generated_corpus(seed)


class CharDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Every window of `block_size` + 1 consecutive tokens, as (input, target) pairs.

    Item i is (data[i : i + block_size], data[i + 1 : i + block_size + 1]): the target is
    the input shifted by one token.
    """

    def __init__(self, data: torch.Tensor, block_size: int) -> None:
        if data.dim() != 1 or data.numel() <= block_size:
            raise ValueError(
                f"need a 1-D tensor longer than block_size={block_size}, got shape "
                f"{tuple(data.shape)}"
            )
        self.data = data
        self.block_size = block_size

    def __len__(self) -> int:
        return self.data.numel() - self.block_size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.data[index : index + self.block_size + 1]
        return chunk[:-1], chunk[1:]


def build_datasets(
    block_size: int, val_fraction: float = 0.1, seed: int = 0
) -> tuple[CharDataset, CharDataset]:
    """Encode the corpus and split it into train and validation datasets.

    The split is contiguous (the last `val_fraction` of the text is validation), so no
    validation window overlaps a training window. `seed` only matters for the generated
    fallback corpus; shuffling is left to the DataLoader.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction} must be in (0, 1)")
    data = encode(build_corpus(seed=seed))
    split = int(data.numel() * (1.0 - val_fraction))
    return CharDataset(data[:split], block_size), CharDataset(data[split:], block_size)
