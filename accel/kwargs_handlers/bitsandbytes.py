"""BitsandbytesKwargs: quantized Linear weights through bitsandbytes (Lightning's BitsandbytesPrecision modes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel._validation import check_choice, choice_error
from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler

BNB_MODES = ("nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "int8-training")
"""Lightning's names: 4-bit NormalFloat / FloatPoint weights, "-dq" with double quantization of the
block scales (QLoRA's), int8 frozen weights (LLM.int8()), int8-training (trainable weights, int8 matmul)."""

if TYPE_CHECKING:  # torch is imported when a handler is built: the command line imports this module without it
    import torch

INT8_MODES = ("int8", "int8-training")
INT8_DTYPE_NAME = "float16"
"""The only compute dtype of the int8 modes: LLM.int8() quantizes activations through float16."""

DTYPE_NAMES = {
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32",
}
"""The dtype spellings `dtype` accepts as text -> torch's name (the settings schema reads them too)."""


@kwargs_handler()
class BitsandbytesKwargs(KwargsHandler):
    """Replace the nn.Linear layers of a prepared model by bitsandbytes' quantized layers.

    Combines with every `mixed_precision` except FP8 (both replace the same layers). This class
    checks values only; whether bitsandbytes is installed and the mode runs on the device is
    checked when the Accelerator is built (see `accel.quantization.capability`).
    """

    mode: str = "nf4-dq"
    """nf4, nf4-dq (the default: QLoRA's), fp4, fp4-dq (4-bit frozen weights), int8 (8-bit frozen weights) or int8-training
    (trainable weights quantized to int8 in each forward)."""
    dtype: torch.dtype | None = None
    """The dtype the quantized layers compute in. None: the precision's compute dtype for the 4-bit
    modes, float16 for the int8 modes (the only one they accept). Strings such as "bf16" are accepted."""
    ignore_modules: tuple[str, ...] = ()
    """fnmatch patterns of qualified module names whose Linear layers stay unquantized; a pattern that
    matches a module keeps every Linear inside it (so "blocks.0" keeps that whole block)."""

    def __post_init__(self) -> None:
        mode = check_choice("BitsandbytesKwargs.mode", self.mode, BNB_MODES)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "dtype", _check_dtype(mode, self.dtype))
        object.__setattr__(self, "ignore_modules", _check_patterns(self.ignore_modules))

    @property
    def is_int8(self) -> bool:
        """True for the 8-bit modes (int8, int8-training)."""
        return self.mode in INT8_MODES


def _check_dtype(mode: str, value: object) -> torch.dtype | None:
    import torch

    if value is None:
        return None
    if isinstance(value, str):
        if value.lower().removeprefix("torch.") not in DTYPE_NAMES:
            raise choice_error("BitsandbytesKwargs.dtype", value, sorted(DTYPE_NAMES), "Or pass a torch.dtype.")
        value = getattr(torch, DTYPE_NAMES[value.lower().removeprefix("torch.")])
    if value not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(
            f"BitsandbytesKwargs.dtype={value!r} is not accepted; accepted: torch.float16, torch.bfloat16, "
            "torch.float32 (or None for the precision's compute dtype)."
        )
    if mode in INT8_MODES and value is not torch.float16:
        raise ValueError(
            f"BitsandbytesKwargs(mode={mode!r}, dtype={value}) cannot run: the int8 modes (LLM.int8()) quantize "
            "activations through float16, so they compute in torch.float16 only. Leave dtype=None (float16) or "
            "pass torch.float16; for bf16/fp32 compute use a 4-bit mode ('nf4', 'nf4-dq', 'fp4', 'fp4-dq')."
        )
    return value


def _check_patterns(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(
            f"BitsandbytesKwargs.ignore_modules={value!r} must be a collection of patterns, not one string "
            f"(a string would be read as one pattern per character); write ignore_modules=[{value!r}]."
        )
    if not isinstance(value, (list, tuple, set, frozenset)) or not all(isinstance(p, str) for p in value):
        raise TypeError(
            f"BitsandbytesKwargs.ignore_modules={value!r} must be a list, tuple or set of strings (fnmatch patterns "
            "of qualified module names, such as 'lm_head' or 'blocks.*.attn')."
        )
    return tuple(sorted(value)) if isinstance(value, (set, frozenset)) else tuple(value)
