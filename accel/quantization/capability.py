"""Which bitsandbytes modes run on this machine, and why not: for the Accelerator's checks and `accel env`.

Each answer comes from running the mode: a 64x64 layer of it is built on the device, run forward
and backward, and its output compared with the unquantized layer's. What is installed or what
the documentation promises is not taken on trust.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from types import ModuleType

import torch

from accel.kwargs_handlers.bitsandbytes import BNB_MODES
from accel.quantization.modes import MODES

INSTALL_HINT = 'pip install bitsandbytes (or pip install "accel[bnb]"; "accel[qlora]" adds peft for LoRA)'


def bitsandbytes_missing_reason() -> str | None:
    """Why bitsandbytes cannot be imported here, or None when it can."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return f"bitsandbytes is not installed: {INSTALL_HINT}"
    try:
        import_bitsandbytes()
    except Exception as error:  # noqa: BLE001 - any import failure is the reason, said as it is
        return f"bitsandbytes is installed but cannot be imported ({type(error).__name__}: {error})"
    return None


@functools.lru_cache(maxsize=1)
def import_bitsandbytes() -> ModuleType:
    """Import bitsandbytes without its start-up banner; ModuleNotFoundError says how to install it."""
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModuleNotFoundError(f"BitsandbytesKwargs needs bitsandbytes, which is not installed: {INSTALL_HINT}")
    os.environ.setdefault("BITSANDBYTES_NOWELCOME", "1")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*compiled without GPU support.*")
        import bitsandbytes

    return bitsandbytes


def mode_reason(mode: str, device: torch.device) -> str | None:
    """Why `mode` cannot run on `device`, or None when it runs (a real forward and backward)."""
    missing = bitsandbytes_missing_reason()
    if missing is not None:
        return missing
    return _probe(mode, str(device))


def supported_modes(device: torch.device) -> dict[str, str | None]:
    """Every mode -> None where it runs on `device`, else the reason it does not."""
    return {mode: mode_reason(mode, device) for mode in BNB_MODES}


def capability_line(device: torch.device) -> str:
    """One line for `accel env`: the bitsandbytes version and which modes run on `device` (or why not)."""
    missing = bitsandbytes_missing_reason()
    if missing is not None:
        return f"bitsandbytes quantization: none ({missing})"
    version = getattr(import_bitsandbytes(), "__version__", "?")
    reasons = supported_modes(device)
    runs = [mode for mode, reason in reasons.items() if reason is None]
    line = f"bitsandbytes {version} quantization on {device.type}: {', '.join(runs) or 'no mode'} run"
    failing = [f"{mode} ({reason})" for mode, reason in reasons.items() if reason is not None]
    return line + (f"; not: {'; '.join(failing)}" if failing else "")


@functools.cache
def _probe(mode: str, device_name: str) -> str | None:
    device = torch.device(device_name)
    if device.type == "meta":
        return "the meta device holds no data to quantize"
    from accel.quantization.layers import layer_class  # needs bitsandbytes, checked above

    spec = MODES[mode]
    dtype = torch.float16 if spec.bits != 4 else torch.float32
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(0)
            linear = torch.nn.Linear(64, 64, device=device)
            layer = layer_class(spec)(64, 64, mode=spec, compute_dtype=dtype, device="meta")
            layer.quantize_weight(linear.weight.data)
            layer.bias = torch.nn.Parameter(linear.bias.detach().clone())
            x = torch.randn(4, 64, device=device, requires_grad=True)
            out = layer(x)
            out.sum().backward()
        error = (out.float() - linear(x).float()).abs().max().item()
    except Exception as exc:  # noqa: BLE001 - whatever bitsandbytes raises is the reason
        return f"bitsandbytes failed on {device}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    if not (error < 0.5 and x.grad is not None and torch.isfinite(x.grad).all()):
        return f"bitsandbytes ran on {device} but gave wrong results (max error {error:.3g})"
    return None
