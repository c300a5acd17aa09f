"""`scaling='mxfp8'` on the `ao` backend: torchao's MXFP8 training (`MXFP8TrainingOpConfig`).

MXFP8 (OCP microscaling) stores E4M3 values with one power-of-two (E8M0) scale per block of 32
values, for all three GEMMs of a Linear. torchao applies it with `quantize_(model,
MXFP8TrainingOpConfig)`, which wraps each converted layer's parameters in a tensor subclass that
routes F.linear to its MXFP8 matmul. Where it runs (torchao 0.18, measured):

- CUDA, compute capability 10.x (Blackwell: B200, GB200, B300): torchao's `mxfp8_rceil` recipe,
  MXFP8 GEMMs through torch._scaled_mm with block scales and Triton/CUDA cast kernels;
- CPU: torchao's `mxfp8_emulated_rceil` recipe: the same MXFP8 quantization (same values, same
  scales), products computed on the dequantized values, as torchao documents it ("for debugging
  or development on non-SM100 machines"). Correct numerics, not speed (a 256-wide Linear took
  ~500 ms against ~3 ms in fp32 per forward and backward here);
- other CUDA GPUs (Hopper, Ada): refused (no MXFP8 GEMM); rowwise or tensorwise scaling runs there.

Two things accel does around torchao 0.18's MXFP8 linear: it adds the bias (torchao's override of
F.linear drops it: measured, a Linear's output lost its bias), and it pads the token count to a
multiple of 32 with zero rows (the weight gradient scales blocks of 32 tokens; zero rows change no
block's amax and add nothing to the product), as `pad_inner_dim` does for torchao's float8 recipes.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from accel.backends.base import Forward, PrecisionBackend
from accel.backends.fp8.ao_import import import_torchao
from accel.backends.fp8.base_precision import FP8Forward
from accel.backends.fp8.te_convert import ParameterMap

MXFP8_BLOCK = 32
"""Values per MXFP8 scale block: both dims of a converted Linear, and the token count, are multiples of it."""
MXFP8_ALIGNMENT_REASON = "torchao's MXFP8 scales blocks of 32 values"
MXFP8_GPU = ((10, 0), (11, 0))
"""Compute capabilities torchao's MXFP8 GEMMs run on (from, up to but not including): Blackwell data-centre GPUs."""


def mxfp8_recipe_name(device: torch.device) -> str:
    """torchao's MXFP8 recipe for `device`: emulated on CPU, its kernels on a Blackwell GPU; else refused."""
    if device.type == "cpu":
        return "mxfp8_emulated_rceil"
    capability = torch.cuda.get_device_capability(device)
    if MXFP8_GPU[0] <= capability < MXFP8_GPU[1]:
        return "mxfp8_rceil"
    raise ValueError(
        f"FP8RecipeKwargs(backend='ao', scaling='mxfp8') cannot run on {torch.cuda.get_device_name(device)} (compute "
        f"capability {capability[0]}.{capability[1]}): torchao's MXFP8 GEMMs need a Blackwell data-centre GPU "
        "(compute capability 10.x: B200, GB200, B300). Use scaling='rowwise' or 'current' (tensorwise) on this GPU, "
        "or backend='te' with scaling='block' on a Hopper GPU."
    )


def mxfp8_config(device: torch.device) -> Any:
    """torchao's MXFP8TrainingOpConfig for `device`, after checking that this torch runs it (refused if not)."""
    import_torchao()
    from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe

    config = MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe(mxfp8_recipe_name(device)))
    try:  # torchao asserts on a torch without the DTensor hooks its MXFP8 tensor needs; ask it on a throwaway layer
        _quantize(nn.Linear(MXFP8_BLOCK, MXFP8_BLOCK, bias=False), config, lambda module: True)
    except AssertionError as error:
        raise ValueError(
            f"FP8RecipeKwargs(backend='ao', scaling='mxfp8') cannot run with torch {torch.__version__}: torchao says "
            f"{error}. Upgrade torch, or use scaling='rowwise' or 'current'."
        ) from error
    return config


def _quantize(model: nn.Module, config: Any, chosen: Any) -> None:
    from torchao.quantization import quantize_

    quantize_(model, config, filter_fn=lambda module, _fqn: chosen(module))


class MXFP8Linear(nn.Linear):
    """An nn.Linear whose weight is torchao's MXFP8 training tensor: its F.linear runs torchao's MXFP8 matmul
    (without the bias, which this adds), on a token count padded to a multiple of 32."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        tokens = input.numel() // input.shape[-1]
        missing = -tokens % MXFP8_BLOCK
        if not missing:
            output = F.linear(input, self.weight)
        else:
            rows = F.pad(input.reshape(tokens, input.shape[-1]), (0, 0, 0, missing))
            output = F.linear(rows, self.weight)[:tokens].reshape(*input.shape[:-1], -1)
        return output if self.bias is None else output + self.bias


def convert_mxfp8(model: nn.Module, chosen: set[int], config: Any, params: ParameterMap) -> None:
    """Run torchao's MXFP8 conversion on the nn.Linear layers whose ids are in `chosen`; each becomes an
    MXFP8Linear whose weight is torchao's MXFP8 tensor and whose bias stays the Parameter it was."""
    layers = [m for m in model.modules() if id(m) in chosen and isinstance(m, nn.Linear)]
    biases = {id(layer): layer.bias for layer in layers}
    weights = {id(layer): cast(nn.Parameter, layer.weight) for layer in layers}
    _quantize(model, config, lambda module: id(module) in chosen)
    for layer in layers:
        layer.bias = biases[id(layer)]  # torchao wraps it too, then never uses it
        params.add(weights[id(layer)], cast(nn.Parameter, layer.weight))
        layer.__class__ = MXFP8Linear


def is_mxfp8_linear(module: nn.Module) -> bool:
    """Whether `module` runs torchao's MXFP8 (converted by accel)."""
    return isinstance(module, MXFP8Linear)


def plain_values(state: dict[str, Any]) -> dict[str, Any]:
    """`state` with torchao's training-tensor wrappers replaced by the tensors they hold (what a checkpoint saves)."""
    return {name: getattr(value, "_data", value) for name, value in state.items()}


class MXFP8Forward(FP8Forward):
    """MXFP8 while the model trains; in eval (unless asked for FP8 there) the same layers run their products in
    the weights' own precision: torch-function dispatch to torchao's wrapper is off, so F.linear reaches the
    tensor underneath."""

    __slots__ = ("_fp8_in_eval",)

    def __init__(self, forward: Forward, base: PrecisionBackend, fp8_in_eval: bool) -> None:
        super().__init__(forward, base)
        self._fp8_in_eval = fp8_in_eval

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.module.training or self._fp8_in_eval:
            return self._run(*args, **kwargs)
        with torch._C.DisableTorchFunctionSubclass():
            return self._run(*args, **kwargs)
