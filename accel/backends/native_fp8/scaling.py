"""Per-tensor FP8 scaling state, with TransformerEngine's delayed-scaling semantics.

One :class:`TensorScaler` serves one tensor role of one layer (its input, its
weight or its output gradient). Each cast measures the tensor's amax and
folds it into the step's running amax; :meth:`TensorScaler.update`, called once
per optimizer step (TransformerEngine does it on autocast exit), rolls that amax
into the history and derives the scale the *next* step casts with:

    scale = (fp8_max / amax) / 2**margin

where amax is the history's maximum (``"max"``) or its newest entry
(``"most_recent"``). An amax that is 0 or not finite keeps the previous scale;
a scale that overflows becomes the float32 maximum.

Two choices differ from TransformerEngine, both to make the first and the bad
steps useful:

* Until the first step with a positive, finite amax has been recorded, the
  history is empty and delayed scaling casts with the tensor's own amax
  (current scaling) instead of TransformerEngine's scale of 1.0, which flushes
  typical gradients (around 1e-5) to zero in the first step.
* A step whose amax is not finite (the step the backend skips) leaves the
  history and the scale as they were, where TransformerEngine would write the
  NaN/inf into the history and freeze the scale for ``amax_history_len`` steps.

All scale and amax arithmetic stays in tensors: no ``.item()``, no device sync.
The state tensors are never modified in place (every update binds new ones), so
a tensor returned earlier, such as a saved ``scale_inv`` or a ``state_dict()``,
stays a snapshot. The once-per-step work over all of a model's scalers (one all-reduce, the
updates stacked) is accel/backends/native_fp8/scaler_group.py.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from accel.backends.native_fp8 import cpu_quantize, fused
from accel.backends.native_fp8.cpu_gemm import compute_dtype
from accel.backends.native_fp8.formats import cast_to_fp8, choice_error, fp8_max
from accel.backends.native_fp8.gemm import operand

SCALING_MODES: tuple[str, ...] = ("delayed", "current")
AMAX_COMPUTE_ALGOS: tuple[str, ...] = ("max", "most_recent")
FP32_MAX: float = torch.finfo(torch.float32).max

STATE_KEYS: tuple[str, ...] = ("amax_history", "scale", "calibrated", "step_amax")
"""What a scaler's checkpoint holds (state_dict / load_state_dict)."""


def check_scaling_args(
    *, margin: int, amax_history_len: int, amax_compute_algo: str, scaling: str
) -> None:
    """Raise ValueError naming the first scaling argument that is out of range."""
    if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
        raise ValueError(f"margin={margin!r} is not supported; accepted: an int >= 0")
    if (
        isinstance(amax_history_len, bool)
        or not isinstance(amax_history_len, int)
        or amax_history_len < 1
    ):
        raise ValueError(
            f"amax_history_len={amax_history_len!r} is not supported; accepted: an int >= 1"
        )
    if amax_compute_algo not in AMAX_COMPUTE_ALGOS:
        raise choice_error("amax_compute_algo", amax_compute_algo, AMAX_COMPUTE_ALGOS)
    if scaling not in SCALING_MODES:
        raise choice_error("scaling", scaling, SCALING_MODES)


def tensor_amax(x: torch.Tensor) -> torch.Tensor:
    """max(|x|) as a float32 0-dim tensor, in one pass; NaN if x holds a NaN, 0 if empty."""
    if x.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=x.device)
    # aminmax reads x once; abs().amax() would also write |x| (measured 4x slower at 4M).
    low, high = torch.aminmax(x)
    amax = torch.maximum(high, low.neg())
    return amax if amax.dtype == torch.float32 else amax.float()


def compute_scale(
    amax: torch.Tensor, previous: torch.Tensor, fp8_max: float, margin: int
) -> torch.Tensor:
    """TransformerEngine's scale: ``(fp8_max / amax) / 2**margin``.

    Keeps ``previous`` where amax is 0 or not finite; an infinite result (amax
    so small that the quotient overflows) becomes the float32 maximum.
    """
    scale = raw_scale(amax, amax.new_full((), fp8_max / 2.0**margin))
    usable = torch.isfinite(amax) & (amax > 0)
    return torch.where(usable, scale, previous)


def raw_scale(amax: torch.Tensor, numerator: torch.Tensor) -> torch.Tensor:
    """``numerator / amax`` with inf (amax 0 or tiny) made the float32 maximum.

    ``numerator`` is fp8_max / 2**margin as a tensor: a power-of-two margin folded
    into the numerator is exact, and a tensor numerator gives true division where a
    Python number would multiply by the reciprocal.
    """
    return torch.nan_to_num(numerator / amax, posinf=FP32_MAX)


class TensorScaler:
    """Scaling state for one tensor role of one FP8 layer.

    ``quantize(x)`` is the hot path: it returns the FP8 tensor and the
    dequantization scale (``1/scale``) that ``torch._scaled_mm`` takes.
    ``update()`` ends a step. Readable state: ``scale`` (the quantization scale
    the next delayed cast uses, or the last current-scaling cast used),
    ``amax_history`` (newest first), ``step_amax`` (the running amax of the step
    in progress) and ``last_stats()``.
    """

    def __init__(
        self,
        dtype: torch.dtype,
        *,
        margin: int = 0,
        amax_history_len: int = 1024,
        amax_compute_algo: str = "max",
        scaling: str = "delayed",
        count_stats: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        check_scaling_args(
            margin=margin,
            amax_history_len=amax_history_len,
            amax_compute_algo=amax_compute_algo,
            scaling=scaling,
        )
        self.dtype = dtype
        self.fp8_max = fp8_max(dtype)
        # The byte of the largest finite magnitude, without its sign bit.
        self._max_magnitude = int(torch.tensor(self.fp8_max, device="cpu").to(dtype).view(torch.uint8).item())
        self.margin = margin
        self.amax_compute_algo = amax_compute_algo
        self.scaling = scaling
        # Counting saturated and flushed values costs extra passes over the tensor: whoever owns
        # the scaler may switch it on for some steps only (the backend counts every Nth step).
        self.count_stats = count_stats
        self.has_counts = False
        """True once a step with counting on has ended: ``last_stats`` then holds its counts."""
        self._init_state(amax_history_len, device)

    def _init_state(self, amax_history_len: int, device: torch.device | str | None) -> None:
        """The state of a scaler that has seen nothing yet."""
        self._numerator = torch.tensor(self.fp8_max / 2.0**self.margin, device=device)
        self.amax_history = torch.zeros(amax_history_len, dtype=torch.float32, device=device)
        self.scale = torch.ones((), dtype=torch.float32, device=device)
        self.calibrated = torch.zeros((), dtype=torch.bool, device=device)
        # Never modified in place, so one zero serves every reset.
        self._zero = torch.zeros((), dtype=torch.float32, device=device)
        self._one = torch.ones((), dtype=torch.float32, device=device)
        self._zero_count = torch.zeros((), dtype=torch.int64, device=device)
        self.step_amax = self._zero
        self.step_saturated = self.step_flushed = self.step_nonzero = self._zero_count
        self.last_amax = self.step_amax
        self.last_saturated = self.last_flushed = self.last_nonzero = self._zero_count
        # Values cast while counting (a Python int: numel needs no device sync) and the nonzero ones
        # among them: the denominators of the saturated and flushed fractions (backends/fp8/health.py).
        self.step_values = self.last_values = 0

    def __repr__(self) -> str:
        return (
            f"TensorScaler(dtype={self.dtype}, scaling={self.scaling!r}, margin={self.margin}, "
            f"amax_history_len={self.amax_history_len}, "
            f"amax_compute_algo={self.amax_compute_algo!r}, count_stats={self.count_stats})"
        )

    @property
    def amax_history_len(self) -> int:
        return self.amax_history.numel()

    @property
    def device(self) -> torch.device:
        return self.amax_history.device

    def quantize(
        self, x: torch.Tensor, x_scale_inv: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cast ``x`` to FP8; returns ``(x_fp8, scale_inv)`` and records x's amax.

        ``x_scale_inv``: ``x`` is stored scaled (a weight in 16-bit storage, see weights.py)
        and its real values are ``x * x_scale_inv``; amax, scale and statistics are those of
        the real values, and the cast folds the two scales into one multiply.
        """
        x = x.detach()  # the cast writes into a preallocated buffer, which autograd refuses
        amax, scale, factor = self._observe(x, x_scale_inv)
        q = cast_to_fp8(x, factor, self.dtype)
        if self.count_stats:
            self._count(x, q, amax * scale)
        return q, scale.reciprocal()

    def quantize_part(self, part: torch.Tensor, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cast ``part`` of a tensor whose amax (over all its parts) is ``amax``; returns ``(part_fp8,
        scale_inv)``. Every part cast with the same ``amax`` (and scaler state) gets the scale the
        whole tensor would, so the parts are bit for bit the whole's cast (FSDP2 shards, fsdp_weight.py)."""
        part = part.detach()
        self.step_amax = torch.maximum(self.step_amax, amax)
        scale = self._scale_for(amax)
        q = cast_to_fp8(part, scale, self.dtype)
        if self.count_stats:
            self._count(part, q, amax * scale)
        return q, scale.reciprocal()

    def quantize_operand(
        self, x: torch.Tensor, x_scale_inv: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`quantize`, returning the FP8 tensor as GEMM operand (gemm.operand), for a tensor
        nothing keeps. On the CPU, unless this step counts statistics (they read the FP8 bytes),
        the operand is made without the FP8 tensor: the same values, faster, by the fused kernel
        (fused.py) where it runs, else by cpu_quantize.py."""
        if self.count_stats:
            q, scale_inv = self.quantize(x, x_scale_inv)
            return operand(q), scale_inv
        x = x.detach()
        if fused.supports(x):
            return self._fused_operand(x, x_scale_inv)
        if not cpu_quantize.supports(x):
            q, scale_inv = self.quantize(x, x_scale_inv)
            return operand(q), scale_inv
        _, scale, factor = self._observe(x, x_scale_inv)
        return cpu_quantize.quantize_operand(x, factor, self.dtype, compute_dtype()), scale.reciprocal()

    def _fused_operand(
        self, x: torch.Tensor, x_scale_inv: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`quantize_operand` by the fused kernel. Once delayed scaling has a history, the
        scale is known before ``x`` is read, and the kernel measures the amax and does the scaler's
        bookkeeping (running amax, inverse scale) in the same call; otherwise (current scaling, the
        first step) the amax is measured first."""
        if self.scaling == "delayed" and bool(self.calibrated):  # a CPU tensor: no device sync
            real = self._one if x_scale_inv is None else x_scale_inv
            result, self.step_amax, scale_inv = fused.quantize_operand_delayed(
                x, self.scale, real, self.step_amax, self.dtype, compute_dtype()
            )
            return result, scale_inv
        _, scale, factor = self._observe(x, x_scale_inv)
        result, _ = fused.quantize_operand(x, factor, self.dtype, compute_dtype())
        return result, scale.reciprocal()

    def _observe(
        self, x: torch.Tensor, x_scale_inv: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Record x's amax; returns (amax, the quantization scale, the factor the cast multiplies by)."""
        amax = tensor_amax(x)
        if x_scale_inv is not None:
            amax = amax * x_scale_inv
        self.step_amax = torch.maximum(self.step_amax, amax)
        scale = self._scale_for(amax)
        return amax, scale, scale if x_scale_inv is None else scale * x_scale_inv

    def _scale_for(self, amax: torch.Tensor) -> torch.Tensor:
        """The quantization scale of this cast, given the tensor's own amax."""
        if self.scaling == "current":
            self.scale = compute_scale(amax, self.scale, self.fp8_max, self.margin)
            return self.scale
        # Delayed, history still empty: cast with the tensor's own amax. This scale is
        # not kept, so amax 0 or NaN needs no guard here (zeros cast to zeros whatever
        # the scale, and a NaN step is flagged and skipped).
        own = raw_scale(amax, self._numerator)
        return torch.where(self.calibrated, self.scale, own)

    def _count(self, x: torch.Tensor, q: torch.Tensor, scaled_amax: torch.Tensor) -> None:
        """Add this cast's saturated and flushed-to-zero counts, from one histogram of the FP8 bytes.

        flushed = nonzero values of x minus nonzero values of q (a cast never makes a zero
        nonzero). saturated = values cast to the format's largest magnitude, counted only
        when the scaled amax exceeded it (else the largest value merely landed on the top).
        """
        # Bytes 0-127 are the magnitudes with sign 0, 128-255 the same with sign 1.
        by_magnitude = torch.bincount(q.view(torch.uint8).reshape(-1), minlength=256).view(2, 128).sum(0)
        nonzero = torch.count_nonzero(x)
        flushed = nonzero - (q.numel() - by_magnitude[0])
        saturated = torch.where(scaled_amax > self.fp8_max, by_magnitude[self._max_magnitude], 0)
        self.step_saturated = self.step_saturated + saturated
        self.step_flushed = self.step_flushed + flushed
        self.step_nonzero = self.step_nonzero + nonzero
        self.step_values += x.numel()

    def update(self) -> None:
        """End a step: roll the step's amax into the history and derive the next scale.

        A non-finite step amax leaves history and scale unchanged (see the module
        docstring). Also publishes the step's statistics as ``last_*`` and resets
        the step's running amax and counts.
        """
        amax = self.step_amax
        finite = torch.isfinite(amax)
        rolled = torch.cat((amax.reshape(1), self.amax_history[:-1]))
        self.amax_history = torch.where(finite, rolled, self.amax_history)
        if self.scaling == "delayed":
            self.scale = compute_scale(self._history_amax(), self.scale, self.fp8_max, self.margin)
        self.calibrated = self.calibrated | (finite & (amax > 0))
        self.last_amax = amax
        self.step_amax = self._zero
        if self.count_stats:
            self.publish_counts()

    def publish_counts(self) -> None:
        """End a counting step: its counts become the ``last_*`` ones and the step's start from zero."""
        self.last_saturated, self.last_flushed = self.step_saturated, self.step_flushed
        self.last_nonzero, self.last_values = self.step_nonzero, self.step_values
        self.step_saturated = self.step_flushed = self.step_nonzero = self._zero_count
        self.step_values = 0
        self.has_counts = True

    def _history_amax(self) -> torch.Tensor:
        if self.amax_compute_algo == "max":
            return self.amax_history.amax()
        return self.amax_history[0]

    def found_nonfinite(self) -> torch.Tensor:
        """0-dim bool tensor: did a tensor cast in this step hold NaN or inf?"""
        return ~torch.isfinite(self.step_amax)

    def last_stats(self) -> dict[str, torch.Tensor]:
        """The last finished step's amax, the current scale, and the saturated/flushed counts of
        the last finished step that counted them (once one has)."""
        stats = {"amax": self.last_amax, "scale": self.scale}
        if self.has_counts:
            stats["saturated"] = self.last_saturated
            stats["flushed"] = self.last_flushed
        return stats

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The state to checkpoint: tensors only (``torch.load(weights_only=True)`` reads it), copies
        (between steps a scaler's tensors are views of the model-wide stacks, see scaler_group.py)."""
        return {key: getattr(self, key).clone() for key in STATE_KEYS}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Restore what :meth:`state_dict` returned; raises ValueError on a mismatch."""
        keys = set(state)
        if keys != set(STATE_KEYS):
            raise ValueError(
                f"scaler state has keys {sorted(keys)}; expected exactly {sorted(STATE_KEYS)}"
            )
        history = state["amax_history"]
        if tuple(history.shape) != (self.amax_history_len,):
            raise ValueError(
                f"amax_history has shape {tuple(history.shape)}; this scaler was built with "
                f"amax_history_len={self.amax_history_len}, so the shape must be "
                f"({self.amax_history_len},)"
            )
        for key in STATE_KEYS:
            current = getattr(self, key)
            value = state[key]
            if value.shape != current.shape:
                raise ValueError(
                    f"{key} has shape {tuple(value.shape)}; expected {tuple(current.shape)}"
                )
            setattr(self, key, value.detach().to(current.device, current.dtype, copy=True))

    def to(self, device: torch.device | str) -> TensorScaler:
        """Move every state tensor to ``device`` (in place; returns self).

        A scaler on the meta device (a model built without memory) holds no values
        to move, so it starts fresh on ``device``.
        """
        if self.device.type == "meta" and torch.device(device).type != "meta":
            self._init_state(self.amax_history_len, device)
            return self
        for key in (*STATE_KEYS, "_numerator", "_zero", "_one", "_zero_count", "step_saturated",
                    "step_flushed", "step_nonzero", "last_amax", "last_saturated", "last_flushed", "last_nonzero"):
            setattr(self, key, getattr(self, key).to(device))
        return self
