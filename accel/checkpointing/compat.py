"""Whether a checkpoint fits this Accelerator: precision and FP8 setup, number of processes, the
prepared objects, and the optimizers' parameter groups. Each check returns the differences it
found, in words, so that one error can say everything that differs."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, cast

from accel.checkpointing.manifest import CONTENTS, Manifest
from accel.kwargs_handlers import FP8RecipeKwargs

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from accel.checkpointing.host import CheckpointHost


def contents_of(accelerator: CheckpointHost) -> dict[str, int]:
    """How many objects of each kind the Accelerator would save (the manifest's `contents`)."""
    counts = (
        len(accelerator.prepared.models),
        len(accelerator.prepared.optimizers),
        len(accelerator.prepared.schedulers),
        len(accelerator.prepared.dataloaders),
        len(accelerator.prepared.registered),
    )
    return dict(zip(CONTENTS, counts))


def fp8_setup(accelerator: CheckpointHost) -> dict[str, Any] | None:
    """{"backend", "recipe"} for a precision that runs an FP8 recipe, else None.

    The backend is the one that runs (an FP8 backend's `library`, where `auto` has been resolved),
    and the recipe's `scaling` the one it runs (its `scaling`, where None has been resolved).
    """
    precision = accelerator.precision
    if FP8RecipeKwargs not in precision.handler_types:
        return None
    recipe = getattr(precision, "recipe", None) or accelerator.handlers.get(FP8RecipeKwargs)
    # an FP8 recipe is a dataclass (kwargs_handler makes it one, which mypy cannot see)
    fields = json.loads(json.dumps(dataclasses.asdict(cast("DataclassInstance", recipe))))
    fields["scaling"] = getattr(precision, "scaling", None) or recipe.scaling
    return {"backend": str(getattr(precision, "library", None) or recipe.backend), "recipe": fields}


def setup_problems(accelerator: CheckpointHost, manifest: Manifest) -> list[str]:
    """Differences in precision, FP8 backend and recipe, processes, objects and accumulation."""
    problems = []
    if manifest.precision != accelerator.precision.name:
        problems.append(
            f"it was saved with mixed_precision={manifest.precision!r}, this Accelerator runs "
            f"{accelerator.precision.name!r} (create it with mixed_precision={manifest.precision!r} to resume)"
        )
    else:
        problems += _fp8_problems(manifest.fp8, fp8_setup(accelerator))
    restored = [loader.config.use_stateful_dataloader for loader in accelerator.prepared.dataloaders]
    problems += _process_problems(manifest, accelerator.process_state.num_processes, restored)
    for kind, count in contents_of(accelerator).items():
        saved = manifest.contents[kind]
        if saved != count:
            problems.append(f"it holds {_count(saved, kind)}, this Accelerator has {_count(count, kind)}")
    accumulation = manifest.gradient_accumulation
    if accumulation["micro_batch"] and accumulation["steps"] != accelerator.gradient_state.num_steps:
        problems.append(
            f"it was saved inside a window of gradient_accumulation_steps={accumulation['steps']}, this Accelerator "
            f"has {accelerator.gradient_state.num_steps}"
        )
    return problems


def _process_problems(manifest: Manifest, processes: int, restored: list[bool]) -> list[str]:
    """A checkpoint loads in another number of processes unless a dataloader whose position load_state
    restores (`restored[i]`: its `use_stateful_dataloader`) was inside an epoch: where each process was in
    it depends on how many split the data."""
    if manifest.num_processes == processes:
        return []
    inside = [f"dataloader {i} at epoch {p['epoch']}, batch {p['batch']}" for i, p in enumerate(manifest.dataloaders)
              if p.get("batch", 0) != 0 and i < len(restored) and restored[i]]
    if not inside:
        return []
    return [
        f"it was saved by {manifest.num_processes} process(es) in the middle of an epoch ({', '.join(inside)}), and "
        f"this run has {processes}: a position inside an epoch cannot be carried over to a different number of "
        f"processes, which split the data differently. Resume with {manifest.num_processes} process(es), from a "
        "checkpoint saved between epochs (any number of processes can resume those), or without "
        "DataLoaderConfiguration(use_stateful_dataloader=True) (the loader then starts a fresh epoch)"
    ]


def optimizer_problems(index: int, optimizer: Any, state: Any) -> list[str]:
    """Differences between a saved optimizer state and the prepared optimizer's parameter groups."""
    groups = state.get("param_groups") if isinstance(state, dict) else None
    if not isinstance(groups, list) or not isinstance(state.get("state"), dict):
        return [f"optimizer {index}: the saved state is not an optimizer state_dict"]
    saved = [len(group.get("params", ())) for group in groups]
    live = [len(group["params"]) for group in optimizer.param_groups]
    if saved != live:
        return [f"optimizer {index}: parameters per group differ (checkpoint {saved}, prepared optimizer {live})"]
    return []


def _fp8_problems(saved: dict[str, Any] | None, live: dict[str, Any] | None) -> list[str]:
    if saved is None or live is None:
        return [] if saved == live else ["its FP8 setup differs from this Accelerator's"]
    if saved.get("backend") != live["backend"]:
        return [f"it was saved with FP8 backend {saved.get('backend')!r}, this Accelerator runs {live['backend']!r}"]
    recipe = saved.get("recipe", {})
    changed = [f"{k} ({recipe.get(k)!r} saved, {v!r} now)" for k, v in live["recipe"].items() if recipe.get(k) != v]
    return [f"its FP8 recipe differs: {', '.join(changed)}"] if changed else []


_SINGULAR = {
    "models": "prepared model",
    "optimizers": "prepared optimizer",
    "schedulers": "prepared scheduler",
    "dataloaders": "prepared dataloader",
    "custom_objects": "object registered with register_for_checkpointing",
}


def _count(number: int, kind: str) -> str:
    noun = _SINGULAR[kind]
    if number != 1:
        noun = noun.replace("object ", "objects ") if kind == "custom_objects" else noun + "s"
    return f"{number} {noun}"
