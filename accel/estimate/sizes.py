"""Accelerate's `estimate-memory` table, computed as Accelerate computes it: a model's total size,
its largest layer, and Accelerate's "Training using Adam" column, for float32/float16/int8/int4.

Kept number for number (a script or a habit reading Accelerate's table reads the same here); accel's
own per-rank training estimate is training.py.
"""

from __future__ import annotations

from collections import defaultdict

from torch import nn

DTYPES = {"float32": 1, "float16": 2, "int8": 4, "int4": 8}  # dtype -> divisor of the float32 size


def convert_bytes(size: float) -> str:
    """'1.5 GB': bytes in the largest unit below 1024 (Accelerate's `convert_bytes`)."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024.0:
            return f"{round(size, 2)} {unit}"
        size /= 1024.0
    return f"{round(size, 2)} PB"


def module_sizes(model: nn.Module) -> dict[str, int]:
    """Bytes of every module's parameters and buffers, by module name ("" is the whole model)."""
    sizes: dict[str, int] = defaultdict(int)
    tensors = [*model.named_parameters(), *model.named_buffers()]
    for name, tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        parts = name.split(".")
        for end in range(len(parts) + 1):
            sizes[".".join(parts[:end])] += size
    return sizes


def largest_layer(model: nn.Module, sizes: dict[str, int]) -> int:
    """The largest "layer": a module without children, or one the model says must not be split
    (transformers' `_no_split_modules`, a decoder block), or a parameter or buffer of the root."""
    keep_whole = set(getattr(model, "_no_split_modules", None) or [])
    todo: list[tuple[str, object]] = [*model.named_parameters(recurse=False), *model.named_children(),
                                      *model.named_buffers(recurse=False)]
    largest = 0
    while todo:
        name, item = todo.pop(0)
        children = list(item.named_children()) if isinstance(item, nn.Module) else []
        if not children or type(item).__name__ in keep_whole:
            largest = max(largest, sizes[name])
        else:
            todo = [(f"{name}.{child}", module) for child, module in children] + todo
    return largest


def adam_training_bytes(total: int, dtype: str) -> int | None:
    """Accelerate's "Training using Adam" for a float32 size: the largest of its model, gradient,
    optimizer and step terms (None where Accelerate prints N/A: int8, int4)."""
    if dtype == "float32":
        return total * 4
    if dtype == "float16":
        return max(total, total + total // 2, total * 2)
    return None


def inference_rows(model: nn.Module, dtypes: list[str]) -> list[list[str]]:
    """Accelerate's table rows: dtype, largest layer, total size, training using Adam (formatted)."""
    sizes = module_sizes(model)
    total, layer = sizes[""], largest_layer(model, sizes)
    rows = []
    for dtype in dtypes:
        training = adam_training_bytes(total, dtype)
        divisor = DTYPES[dtype]  # Accelerate divides only below float32 (an int prints without ".0")
        rows.append([dtype, convert_bytes(layer / divisor if divisor > 1 else layer),
                     convert_bytes(total / divisor if divisor > 1 else total),
                     convert_bytes(training) if training is not None else "N/A"])
    return rows
