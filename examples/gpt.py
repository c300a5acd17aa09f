"""The small GPT-style character language model of the examples, and its data.

The model lives in the installed package (`accel.bench.gpt`), where `accel bench` trains it by
default; this file re-exports it so that the examples and benchmarks can `from gpt import GPT`
and there is one copy. See accel/bench/gpt.py for the model, the corpus and `CharDataset`.
"""

from accel.bench.gpt import (
    CORPUS_MODULES,
    GPT,
    MLP,
    UNKNOWN,
    VOCAB,
    Block,
    CausalSelfAttention,
    CharDataset,
    GPTConfig,
    build_corpus,
    build_datasets,
    decode,
    encode,
    generated_corpus,
)

__all__ = [
    "CORPUS_MODULES",
    "GPT",
    "MLP",
    "UNKNOWN",
    "VOCAB",
    "Block",
    "CausalSelfAttention",
    "CharDataset",
    "GPTConfig",
    "build_corpus",
    "build_datasets",
    "decode",
    "encode",
    "generated_corpus",
]
