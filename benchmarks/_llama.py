"""A Llama-shaped decoder in plain PyTorch, for the FP8 benchmarks (no transformers needed).

Pre-norm blocks of RMSNorm, grouped-query attention with rotary positions (wq, wk, wv, wo) and a
SwiGLU MLP (w1, w3, w2), a tied-free output head: the Linear shapes of Llama 3. The defaults are
one Llama-3-8B block's widths (dim 4096, 32 heads, 8 key/value heads, MLP 14336), so the FP8
layers see the shapes the published FP8 numbers were measured on; `tiny()` is the CPU smoke size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaShape:
    """The widths of the model. vocab is the output head's width (tokens must be below it)."""

    dim: int = 4096
    n_layers: int = 2
    n_heads: int = 32
    n_kv_heads: int = 8
    ffn_dim: int = 14336
    vocab: int = 128
    max_seq: int = 4096

    @staticmethod
    def tiny() -> LlamaShape:
        """The CPU smoke size: every width a multiple of 16, 2 key/value heads for 4 query heads."""
        return LlamaShape(dim=64, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=176, vocab=128, max_seq=64)


def rotary(seq: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of Llama's rotary positions (theta 500000), (seq, head_dim / 2)."""
    inverse = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inverse)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (batch, heads, seq, head_dim) turned by the rotary angles, pairs of halves."""
    first, second = x.float().chunk(2, dim=-1)
    turned = torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return turned.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = shape.n_heads, shape.n_kv_heads, shape.dim // shape.n_heads
        self.wq = nn.Linear(shape.dim, shape.dim, bias=False)
        self.wk = nn.Linear(shape.dim, shape.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(shape.dim, shape.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(shape.dim, shape.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        repeat = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.w1 = nn.Linear(shape.dim, shape.ffn_dim, bias=False)
        self.w3 = nn.Linear(shape.dim, shape.ffn_dim, bias=False)
        self.w2 = nn.Linear(shape.ffn_dim, shape.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(shape.dim, eps=1e-5), nn.RMSNorm(shape.dim, eps=1e-5)
        self.attention, self.feed_forward = Attention(shape), FeedForward(shape)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """tokens (batch, seq) -> logits (batch, seq, vocab)."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.shape = shape
        self.tok_embeddings = nn.Embedding(shape.vocab, shape.dim)
        self.layers = nn.ModuleList(Block(shape) for _ in range(shape.n_layers))
        self.norm = nn.RMSNorm(shape.dim, eps=1e-5)
        self.output = nn.Linear(shape.dim, shape.vocab, bias=False)
        for param in self.parameters():  # Llama's small-init: normal(0, 0.02), norms at 1
            if param.dim() == 2:
                nn.init.normal_(param, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cos, sin = rotary(tokens.shape[1], self.shape.dim // self.shape.n_heads, tokens.device)
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))
