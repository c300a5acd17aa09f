"""mixed_precision='fp8': the FP8 backends' base class and the choice between them.

`FP8RecipeKwargs(backend=...)` names one backend; `auto` takes the first that can run here,
in the order te, ao, msamp, native on a CUDA GPU with FP8, else native. A backend that cannot
run here raises with the reason; accel never falls back to another precision.
"""

from __future__ import annotations

import logging
from typing import ClassVar

import torch

from accel.backends.base import PrecisionBackend
from accel.backends.capability import cuda_fp8_reason
from accel.backends.conversion import ConversionReport
from accel.kwargs_handlers import FP8RecipeKwargs, Handlers

logger = logging.getLogger("accel")

AUTO_ORDER = ("te", "ao", "msamp", "native")
"""The order `backend='auto'` tries on a CUDA GPU with FP8."""


class FP8Backend(PrecisionBackend):
    """Base of the FP8 backends: the recipe, its checks, the conversion report and statistics."""

    name = "fp8"
    compute_dtype = torch.float8_e4m3fn
    handler_types = (FP8RecipeKwargs,)
    library: ClassVar[str] = ""
    """The backend's name in FP8RecipeKwargs(backend=...)."""
    scalings: ClassVar[tuple[str, ...]] = ()
    """The `scaling` values this backend runs; the first is its default."""
    honoured_fields: ClassVar[frozenset[str]] = frozenset()
    """Recipe fields this backend honours when the user sets them (besides backend and scaling)."""

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        self.recipe = handlers.get(FP8RecipeKwargs)
        self.scaling = self.recipe.scaling or self.scalings[0]
        self._check_recipe()
        self.conversion_report: ConversionReport | None = None
        self.selection = f"FP8 backend {self.library!r}: asked for by name"
        """Why this backend runs: asked by name, or chosen by `auto` (and why not the others)."""

    @classmethod
    def availability(cls, device: torch.device) -> str | None:
        """Why this backend cannot run on `device`, or None when it can."""
        return None

    def _check_recipe(self) -> None:
        """Raise for a recipe field set explicitly that this backend cannot honour."""
        if self.scaling not in self.scalings:
            raise ValueError(
                f"FP8RecipeKwargs(scaling={self.scaling!r}) cannot run on the {self.library!r} FP8 backend; "
                f"it runs scaling {', '.join(map(repr, self.scalings))}."
            )
        unhonoured = sorted(self.recipe.explicit_fields - self.honoured_fields - {"backend", "scaling"})
        if unhonoured:
            raise ValueError(
                f"FP8RecipeKwargs sets {', '.join(unhonoured)}, which the {self.library!r} FP8 backend cannot honour "
                f"(it honours {', '.join(sorted(self.honoured_fields))}). Remove "
                f"{'it' if len(unhonoured) == 1 else 'them'}, or choose a backend that honours "
                f"{'it' if len(unhonoured) == 1 else 'them'} (docs/fp8-backends.md)."
            )

    def fp8_stats(self) -> dict[str, dict[str, float]]:
        """Per layer: amax, scale and over/underflow counts of the last step. Default: none."""
        return {}

    def _record_conversion(self, report: ConversionReport) -> None:
        """Keep the report, log its summary once, and refuse a model with nothing to convert."""
        if not report.num_fp8:
            raise ValueError(
                "mixed_precision='fp8' found no nn.Linear layer it can run in FP8, so nothing would run in FP8.\n"
                + report.details()
            )
        self.conversion_report = report
        logger.info(report.summary())


FP8_BACKENDS: dict[str, type[FP8Backend]] = {}
"""FP8 backend name -> class; each backend module registers itself with `register_fp8_backend`."""


def register_fp8_backend(cls: type[FP8Backend]) -> type[FP8Backend]:
    """Class decorator: make `cls` selectable as FP8RecipeKwargs(backend=cls.library)."""
    FP8_BACKENDS[cls.library] = cls
    return cls


def create_fp8_backend(device: torch.device, handlers: Handlers) -> FP8Backend:
    """Build the FP8 backend the recipe asks for, or raise saying why it cannot run here."""
    requested = handlers.get(FP8RecipeKwargs).backend
    cls, selection = _choose(requested, device)
    backend = cls(device, handlers)
    backend.selection = selection
    logger.info(selection)
    return backend


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


def _import_backends() -> None:
    """Import the backend modules, which register themselves (none imports its library)."""
    import accel.backends.fp8_ao  # noqa: F401
    import accel.backends.fp8_msamp  # noqa: F401
    import accel.backends.fp8_native  # noqa: F401
    import accel.backends.fp8_te  # noqa: F401


def fp8_backend_status(device: torch.device) -> dict[str, str | None]:
    """For every FP8 backend name: None when it can run on `device`, else why not."""
    _import_backends()
    status: dict[str, str | None] = {}
    for name in AUTO_ORDER:
        cls = FP8_BACKENDS.get(name)
        status[name] = "not implemented in this version of accel" if cls is None else cls.availability(device)
    return status

