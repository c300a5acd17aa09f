"""Which layers of a model tensor parallelism splits, and how: the plan, resolved and checked before anything changes.

A plan maps module names to styles. Keys may hold `*` for one name part ("model.layers.*.mlp.up_proj", as
transformers writes them); values are transformers' style names ("colwise", "rowwise", ...) or torch
`ParallelStyle` objects (`ColwiseParallel()`, ...). The plan comes from the user (`plan=`), else from the model
(a transformers model's `tp_plan` / `_tp_plan`). `resolve_plan` expands it to concrete module names with torch
styles and checks that every split layer divides by the tp size, naming the layer and its dimension when not.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel

Plan = Mapping[str, "str | ParallelStyle"]

STYLES: dict[str, Callable[[], ParallelStyle | None]] = {
    "colwise": ColwiseParallel,
    "rowwise": RowwiseParallel,
    "colwise_rep": lambda: ColwiseParallel(output_layouts=Replicate()),
    "colwise_gather_output": lambda: ColwiseParallel(output_layouts=Replicate()),
    "rowwise_rep": lambda: RowwiseParallel(input_layouts=Replicate()),
    "rowwise_split_input": lambda: RowwiseParallel(input_layouts=Replicate()),
    "embedding_rowwise": lambda: RowwiseParallel(input_layouts=Replicate()),
    "embedding_colwise": lambda: ColwiseParallel(output_layouts=Replicate()),
    "replicate": lambda: None,
}
"""transformers' style names accel runs -> the torch style (None: the layer stays whole on every process).
Row-wise embeddings split the vocabulary, column-wise ones the hidden size; `*_rep` / `*_gather_output`
give every process the whole output."""

REFUSED_STYLES = {
    "sequence_parallel": "it splits activations along the sequence, which the neighbouring colwise/rowwise layers "
    "of accel's plan do not expect",
    "packed_colwise": "fused (packed) projections need transformers' own strided sharding",
    "packed_rowwise": "fused (packed) projections need transformers' own strided sharding",
}
"""transformers' style names accel does not run, with the reason; any other unknown name is refused too."""


def check_plan(argument: str, plan: object) -> dict[str, str | ParallelStyle]:
    """`plan` as a dict, or ValueError/TypeError naming the entry that is not a module name -> known style.

    >>> check_plan("plan", {"fc1": "colwise"})
    {'fc1': 'colwise'}
    """
    if not isinstance(plan, Mapping):
        raise TypeError(f"{argument}={plan!r} must be a dict of module name -> style, not {type(plan).__name__}.")
    for key, value in plan.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"{argument}: key {key!r} must be a module name (a non-empty str, '*' for one name part).")
        _style(key, value)
    return dict(plan)


def model_plan(model: nn.Module) -> dict[str, str] | None:
    """A transformers model's own plan (`tp_plan`, else `_tp_plan`, with its base model's prefix), or None."""
    for attribute in ("tp_plan", "_tp_plan"):
        try:
            plan = getattr(model, attribute, None)
        except Exception:  # a property that needs a distributed setup transformers does not have here
            plan = None
        if isinstance(plan, Mapping) and plan:
            return dict(plan)
    return None


def choose_plan(model: nn.Module, given: Plan | None) -> tuple[Plan, bool]:
    """(the plan to apply, whether the user gave it): `given` when there is one, else the model's own.

    Raises ValueError naming what to give when there is neither.
    """
    if given is not None:
        return given, True
    own = model_plan(model)
    if own is None:
        names = [name for name, module in model.named_modules() if isinstance(module, (nn.Linear, nn.Embedding))]
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise ValueError(
            f"tensor parallelism (tp_size > 1): the model ({type(model).__name__}) has no tp_plan, and no plan was given. "
            "Give one mapping module names to styles: ParallelismConfig(tp_size=..., tp_handler=TorchTensorParallelConfig("
            "plan={'fc1': 'colwise', 'fc2': 'rowwise'})) (names may use '*' "
            f"for layer numbers; styles: {', '.join(STYLES)}, or torch ParallelStyle objects). Its Linear/Embedding "
            f"layers: {shown or '(none)'}. A transformers model built from a config that defines base_model_tp_plan "
            "carries its own."
        )
    return own, False


def resolve_plan(model: nn.Module, plan: Plan, tp_size: int, given: bool) -> dict[str, ParallelStyle]:
    """`plan` expanded to the concrete names of `model`'s modules, with torch styles; checked against `tp_size`.

    Raises ValueError for an unknown or refused style, a key of a user's plan that matches no module, a
    layer that is not nn.Linear/nn.Embedding, or a dimension (or attention head count) `tp_size` does not
    divide. Keys of a model's own plan that match nothing are skipped (its plan covers variants of the model).

    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    >>> sorted(resolve_plan(model, {"0": "colwise", "2": "rowwise"}, 2, given=True))
    ['0', '2']
    """
    modules = dict(model.named_modules())
    resolved: dict[str, ParallelStyle] = {}
    for key, value in plan.items():
        matches = [name for name in modules if _matches(name, key)]
        if not matches and given:
            raise ValueError(
                f"tensor parallel plan key {key!r} matches no module of {type(model).__name__}. Its modules: "
                f"{', '.join(name for name in list(modules)[1:13])}{', ...' if len(modules) > 13 else ''}."
            )
        for name in matches:
            style = _style(key, value)
            if style is not None:
                _check_layer(name, modules[name], style, tp_size)
                resolved[name] = style
    if any(isinstance(style, ColwiseParallel) for style in resolved.values()):
        _check_heads(model, tp_size)
    return resolved


def _matches(name: str, pattern: str) -> bool:
    """True when the dotted `name` matches `pattern` part by part (`*` stands for one part)."""
    parts, wanted = name.split("."), pattern.split(".")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted))


def _style(key: str, value: object) -> ParallelStyle | None:
    """The torch style for plan entry `key: value` (None: left whole)."""
    if isinstance(value, ParallelStyle):
        return value
    if isinstance(value, str) and value in STYLES:
        return STYLES[value]()
    reason = REFUSED_STYLES.get(value) if isinstance(value, str) else None
    why = f": {reason}" if reason else ""
    raise ValueError(
        f"tensor parallel plan {key!r}: {value!r} is not a style accel runs{why}. Accepted: "
        f"{', '.join(map(repr, STYLES))}, or a torch.distributed.tensor.parallel ParallelStyle object."
    )


def _check_layer(name: str, module: nn.Module, style: ParallelStyle, tp_size: int) -> None:
    """Raise ValueError when `style` cannot split `module` evenly over `tp_size` processes."""
    if not isinstance(style, (ColwiseParallel, RowwiseParallel)):
        return  # another torch style (SequenceParallel, PrepareModuleInput, ...) checks its own input
    if not isinstance(module, (nn.Linear, nn.Embedding)):
        raise ValueError(
            f"tensor parallel plan: layer {name!r} is a {type(module).__name__}; {type(style).__name__} splits only "
            "nn.Linear and nn.Embedding layers. Plan its Linear/Embedding submodules instead."
        )
    colwise = isinstance(style, ColwiseParallel)
    if isinstance(module, nn.Linear):
        dimension, size = ("out_features", module.out_features) if colwise else ("in_features", module.in_features)
    else:
        dimension, size = ("embedding_dim", module.embedding_dim) if colwise else ("num_embeddings", module.num_embeddings)
    if size % tp_size:
        divisors = [d for d in range(2, size + 1) if size % d == 0][:6]
        raise ValueError(
            f"tensor parallelism: tp_size={tp_size} does not divide layer {name!r} ({type(module).__name__}, "
            f"{type(style).__name__}): its {dimension} is {size}. Choose a tp_size that divides {size} "
            f"(e.g. {', '.join(map(str, divisors)) or 'none above 1'}), or leave this layer out of the plan."
        )


def _check_heads(model: nn.Module, tp_size: int) -> None:
    """A transformers model whose attention projections are split column-wise needs whole heads per process."""
    config: Any = getattr(model, "config", None)
    if config is None:
        return
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for field in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(text, field, None)
        if isinstance(heads, int) and heads % tp_size:
            raise ValueError(
                f"tensor parallelism: tp_size={tp_size} does not divide the model's config.{field}={heads}: each "
                f"process must hold whole attention heads. Choose a tp_size that divides {heads} (1: no tensor parallelism)."
            )
