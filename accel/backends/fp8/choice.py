"""mixed_precision='fp8': which FP8 backend runs (the backends themselves subclass base.FP8Backend).

`FP8RecipeKwargs(backend=...)` names one backend; `auto` takes the first that can run here,
in the order te, ao, msamp, native on a CUDA GPU with FP8, else native. A backend that cannot
run here raises with the reason; accel never falls back to another precision.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import torch

from accel.backends.capability import cuda_fp8_reason
from accel.backends.fp8.base import FP8_BACKENDS, FP8Backend
from accel.kwargs_handlers import FP8RecipeKwargs, Handlers, KwargsHandler

logger = logging.getLogger("accel")

AUTO_ORDER = ("te", "ao", "msamp", "native")
"""The order `backend='auto'` tries on a CUDA GPU with FP8."""

def create_fp8_backend(device: torch.device, handlers: Handlers) -> FP8Backend:
    """Build the FP8 backend the recipe asks for, or raise saying why it cannot run here."""
    requested = handlers.get(FP8RecipeKwargs).backend
    cls, selection = _choose(requested, device)
    backend = cls(device, handlers)
    backend.selection = selection
    logger.info(selection)
    return backend


def apply_precision_recipe(name: str, fields: Mapping[str, str], handlers: Handlers) -> Handlers:
    """`handlers` with the FP8 recipe that the precision `name` (such as "transformer-engine") implies.

    The recipe the user gave (or `accel launch` passed) keeps its other fields; a field it sets
    explicitly to another value than `name` implies raises, as the two ask for different things.
    """
    recipe = handlers.get(FP8RecipeKwargs)
    implied = ", ".join(f"{field}={value!r}" for field, value in fields.items())
    conflicts = [
        f"{f}={getattr(recipe, f)!r}" for f, v in fields.items() if f in recipe.explicit_fields and getattr(recipe, f) != v
    ]
    if conflicts:
        raise ValueError(
            f"mixed_precision={name!r} means mixed_precision='fp8' with FP8RecipeKwargs({implied}), but the FP8 "
            f"recipe sets {', '.join(conflicts)}. Use mixed_precision='fp8' with your recipe, or drop "
            f"{'that field' if len(conflicts) == 1 else 'those fields'}."
        )
    merged: dict[type[KwargsHandler], KwargsHandler] = {FP8RecipeKwargs: recipe.with_fields(**fields)}
    if handlers.has(FP8RecipeKwargs):
        return dataclasses.replace(handlers, given={**handlers.given, **merged})
    return dataclasses.replace(handlers, environment={**handlers.environment, **merged})


def _choose(requested: str, device: torch.device) -> tuple[type[FP8Backend], str]:
    _import_backends()
    if requested != "auto":
        cls = _registered(requested)
        reason = cls.availability(device)
        if reason is not None:
            raise RuntimeError(
                f"FP8RecipeKwargs(backend={requested!r}) cannot run here: {reason}. accel will not run another "
                "backend or precision in its place; backend='native' runs FP8 on any device."
            )
        return cls, f"FP8 backend {requested!r}: asked for by name"
    gpu_reason = cuda_fp8_reason(device)
    if gpu_reason is not None:
        return _registered("native"), f"FP8 backend 'native' chosen by auto ({_off_gpu_reasons(device, gpu_reason)})"
    refusals: list[str] = []
    for name in AUTO_ORDER:
        reason = FP8_BACKENDS[name].availability(device) if name in FP8_BACKENDS else "not implemented"
        if reason is None:
            return FP8_BACKENDS[name], f"FP8 backend {name!r} chosen by auto" + (
                f" ({'; '.join(refusals)})" if refusals else ""
            )
        refusals.append(f"{name}: {reason}")
    raise RuntimeError("no FP8 backend can run here: " + "; ".join(refusals))


def _off_gpu_reasons(device: torch.device, gpu_reason: str) -> str:
    """Why auto took native, and in brief why not each library backend (`accel env` has the details)."""
    reasons: list[str] = []
    for name in AUTO_ORDER[:-1]:
        cls = FP8_BACKENDS.get(name)
        reason = "not implemented" if cls is None else cls.availability(device)
        if reason is None:
            brief = f"can run here, but auto takes it only on a CUDA GPU with FP8; ask for backend={name!r}"
        else:  # each reason without the device part said once above, and without install hints
            parts = [part.split(" (")[0] for part in reason.split("; ") if part != gpu_reason]
            brief = "; ".join(parts) or "no FP8 GPU"
        reasons.append(f"{name}: {brief}")
    return f"{gpu_reason}; " + "; ".join(reasons)


def _registered(name: str) -> type[FP8Backend]:
    _import_backends()
    if name not in FP8_BACKENDS:
        raise NotImplementedError(
            f"FP8RecipeKwargs(backend={name!r}) is not implemented in this version of accel "
            f"(available: {', '.join(sorted(FP8_BACKENDS)) or 'none'}). accel will not run another "
            "backend or precision in its place."
        )
    return FP8_BACKENDS[name]


def default_scaling(backend: str) -> str:
    """The scaling `backend` runs when the recipe names none (its first), for `auto` native's.

    >>> default_scaling("native")
    'delayed'
    """
    return _registered("native" if backend == "auto" else backend).scalings[0]


def _import_backends() -> None:
    """Import the backend modules, which register themselves (none imports its library)."""
    import accel.backends.fp8.ao  # noqa: F401
    import accel.backends.fp8.msamp  # noqa: F401
    import accel.backends.fp8.native  # noqa: F401
    import accel.backends.fp8.te  # noqa: F401


def fp8_backend_status(device: torch.device) -> dict[str, str | None]:
    """For every FP8 backend name: None when it can run on `device`, else why not."""
    _import_backends()
    status: dict[str, str | None] = {}
    for name in AUTO_ORDER:
        cls = FP8_BACKENDS.get(name)
        status[name] = "not implemented in this version of accel" if cls is None else cls.availability(device)
    return status

