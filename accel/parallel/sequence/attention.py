"""Ulysses around a transformers model's own attention function: heads exchanged for positions before it,
positions exchanged back for heads after it.

transformers' attention modules call `ALL_ATTENTION_FUNCTIONS[config._attn_implementation](module, query,
key, value, attention_mask, ...)`. `install` puts a dispatcher in that registry's place for "sdpa" once per
process; it runs Ulysses only for modules of a model prepared with sequence parallelism (each of that
model's modules carries its group, `MARK`) and calls the original function for every other model, so a
second model in the same script (an evaluation copy, a reference model) is unchanged.

The attention mask transformers made is for this rank's slice of the sequence and so is dropped: after the
exchange every rank holds every position, and sdpa's `is_causal` masks them. That is exact for causal
attention without padding on the left, which the batch sharding checks (batches.py); `check_model`
refuses, at prepare, the models whose attention is not plain causal attention over the whole sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from accel.parallel.context import refuse_windowed_layers
from accel.parallel.sequence.collectives import heads_to_sequence, sequence_to_heads

MARK = "_accel_sequence_group"
"""The attribute that carries (group, ranks) on every module of a model prepared with sequence parallelism."""
IMPLEMENTATIONS = ("sdpa",)
"""The attention implementations Ulysses wraps: they take every position at once and mask causally by flag."""
_INSTALLED = "_accel_ulysses_original"


def check_model(model: nn.Module, ranks: int) -> Any:
    """Refuse, naming the reason and what runs, a model whose attention Ulysses cannot split over `ranks`
    processes; return its text config.

    Args:
        model: The model given to prepare (a transformers model: it has a `config`).
        ranks: sp_size.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "num_attention_heads") and not hasattr(config, "get_text_config"):
        raise ValueError(
            f"ParallelismConfig(sp_size={ranks}): the model ({type(model).__name__}) is not a transformers model (it has "
            "no config with num_attention_heads); sequence parallelism wraps transformers' attention functions. Load "
            "the model with transformers, or use sp_size=1."
        )
    text: Any = config.get_text_config() if hasattr(config, "get_text_config") else config
    implementation = getattr(text, "_attn_implementation", None)
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"ParallelismConfig(sp_size={ranks}): the model's attention implementation is {implementation!r}; sequence "
            f"parallelism runs {', '.join(map(repr, IMPLEMENTATIONS))} (causal by flag, so the whole sequence needs no "
            "mask in memory). Load the model with attn_implementation='sdpa'."
        )
    for field in ("num_attention_heads", "num_key_value_heads"):
        heads = int(getattr(text, field, 0) or text.num_attention_heads)
        if heads % ranks:
            raise ValueError(
                f"ParallelismConfig(sp_size={ranks}): the model's {field} is {heads}, which {ranks} processes cannot "
                f"share (each takes heads / sp_size of them). Give an sp_size that divides {heads}."
            )
    refuse_windowed_layers(model, f"ParallelismConfig(sp_size={ranks})")
    return text


def mark(model: nn.Module, group: Any, ranks: int) -> None:
    """Make every module of `model` attend through Ulysses over `group` (and install the dispatcher).

    Args:
        model: The model's modules to mark.
        group: The sequence-parallel process group.
        ranks: Its size.
    """
    install()
    for module in model.modules():
        object.__setattr__(module, MARK, (group, ranks))


def install() -> None:
    """Put the dispatcher in transformers' attention registry for each implementation in `IMPLEMENTATIONS`
    (once per process: a second call changes nothing)."""
    from transformers.modeling_utils import AttentionInterface

    for name in IMPLEMENTATIONS:
        current: Any = AttentionInterface._global_mapping[name]
        if getattr(current, _INSTALLED, None) is None:
            AttentionInterface.register(name, _dispatcher(current))


def _dispatcher(original: Callable[..., Any]) -> Callable[..., Any]:
    def attend(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: Any, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        marked = module.__dict__.get(MARK)
        if marked is None:
            return original(module, query, key, value, attention_mask, *args, **kwargs)
        group, ranks = marked
        query, key, value = (heads_to_sequence(x, group, ranks) for x in (query, key, value))
        output, _ = original(module, query, key, value, None, *args, **kwargs)
        return sequence_to_heads(output, group, ranks), None

    setattr(attend, _INSTALLED, original)
    return attend
