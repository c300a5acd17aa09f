"""TorchDynamoPlugin and DynamoBackend: Accelerate's torch.compile options, checked at construction.

The plugin validates what can be judged without torch (a known backend name, a known mode, a
mode only where the backend takes one, the types). Whether the backend runs on this machine
(registered in the installed torch, its library present, the device it needs) is checked by the
Accelerator (accel/training/compiling.py). A field left as None is read by the Accelerator
from its ACCEL_DYNAMO_* variable (set by `accel launch`), as Accelerate's plugin reads
ACCELERATE_DYNAMO_*. Torch-free, so that the settings schema can use the names.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from accel._validation import choice_error
from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler


class DynamoBackend(str, enum.Enum):
    """Accelerate's backend names (its DynamoBackend), given in any case; NO does not compile."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    CUDAGRAPHS = "CUDAGRAPHS"
    OFI = "OFI"
    FX2TRT = "FX2TRT"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    AOT_TORCHXLA_TRACE_ONCE = "AOT_TORCHXLA_TRACE_ONCE"
    TORCHXLA_TRACE_ONCE = "TORCHXLA_TRACE_ONCE"
    TVM = "TVM"
    HPU_BACKEND = "HPU_BACKEND"
    NEURON = "NEURON"


DYNAMO_BACKENDS: tuple[str, ...] = tuple(member.value.lower() for member in DynamoBackend)
"""The accepted backend names, canonical (lower-case, torch's spelling): 'no', 'eager', 'inductor', ..."""
DYNAMO_MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""torch.compile's modes; only inductor takes one other than 'default'."""
BACKENDS_WITH_MODES = frozenset({"inductor"})
"""Backends whose compiler reads `mode` (torch passes it to the others, which ignore it with a log line)."""


def backend_name(value: Any, argument: str = "dynamo_backend") -> str:
    """The canonical backend name ('inductor') for `value` (a name in any case, or a DynamoBackend).

    Raises ValueError naming `argument`, the value, the accepted names and the closest one.
    """
    name = value.value if isinstance(value, DynamoBackend) else value
    if isinstance(name, str) and name.strip().lower() in DYNAMO_BACKENDS:
        return name.strip().lower()
    raise choice_error(argument, value, DYNAMO_BACKENDS)


def check_mode(backend: str, mode: Any, argument: str = "mode") -> str:
    """The canonical mode for `backend`: one of DYNAMO_MODES, and not 'default' only with inductor."""
    if not isinstance(mode, str) or mode.strip().lower() not in DYNAMO_MODES:
        raise choice_error(argument, mode, DYNAMO_MODES)
    mode = mode.strip().lower()
    if mode != "default" and backend not in BACKENDS_WITH_MODES:
        raise ValueError(
            f"{argument}={mode!r} is not accepted with backend {backend!r}: only {sorted(BACKENDS_WITH_MODES)} "
            f"compiles with a mode (torch would ignore it). Use mode 'default' (or leave it out), or backend 'inductor'."
        )
    return mode


@kwargs_handler()
class TorchDynamoPlugin(KwargsHandler):
    """torch.compile's options for the models `prepare` compiles (Accelerate's fields).

    `backend` (a DynamoBackend name, any case; "no" compiles nothing), `mode` (inductor's:
    "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"), `fullgraph`
    (raise at a graph break instead of splitting), `dynamic` (None lets torch decide), `options`
    (a dict for the backend; not with a mode other than "default"), `disable` (torch.compile's
    no-op switch), `use_regional_compilation` (compile each repeated block, and each other part,
    on its own, in place: shorter compiles; docs/compile.md). A field left as None takes its
    ACCEL_DYNAMO_* variable, else its default.
    """

    backend: Any = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: Mapping[str, Any] | None = None
    disable: bool = False
    use_regional_compilation: bool | None = None

    def __post_init__(self) -> None:
        if self.backend is not None:
            object.__setattr__(self, "backend", backend_name(self.backend, "TorchDynamoPlugin.backend"))
        if self.mode is not None:
            mode = check_mode(self.backend or "inductor", self.mode, "TorchDynamoPlugin.mode")
            object.__setattr__(self, "mode", mode)
        for field in ("fullgraph", "dynamic"):
            if getattr(self, field) is not None and not isinstance(getattr(self, field), bool):
                raise TypeError(f"TorchDynamoPlugin.{field}={getattr(self, field)!r} must be True, False or None.")
        if not isinstance(self.disable, bool):
            raise TypeError(f"TorchDynamoPlugin.disable={self.disable!r} must be True or False.")
        self._check_options()
        if self.use_regional_compilation is not None and not isinstance(self.use_regional_compilation, bool):
            raise TypeError(
                f"TorchDynamoPlugin.use_regional_compilation={self.use_regional_compilation!r} must be True, False "
                "or None."
            )

    def _check_options(self) -> None:
        if self.options is None:
            return
        if not isinstance(self.options, Mapping):
            raise TypeError(f"TorchDynamoPlugin.options={self.options!r} must be a dict of backend options or None.")
        if self.mode not in (None, "default"):
            raise ValueError(
                f"TorchDynamoPlugin got mode={self.mode!r} and options: torch.compile takes one or the other. "
                "Put the mode's settings into options, or drop options."
            )

    def to_kwargs(self) -> dict[str, Any]:
        """torch.compile's keyword arguments for the fields set (Accelerate's meaning; no regional flag)."""
        kwargs = super().to_kwargs()
        kwargs.pop("use_regional_compilation", None)
        return kwargs
