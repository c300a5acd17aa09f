"""The toy regression data and model of Accelerate's test suite (`accelerate.test_utils.training`).

Users' own test suites build on them; the numbers are Accelerate's: the same seed gives the same
samples, and the model starts from the same parameters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class RegressionDataset:
    """`length` samples `{"x": x, "y": a * x + b + noise}` (float32), drawn from `np.random.default_rng(seed)`.

    Example:
        >>> data = RegressionDataset(length=4, seed=42)
        >>> len(data), sorted(data[0])
        (4, ['x', 'y'])
    """

    def __init__(self, a: float = 2, b: float = 3, length: int = 64, seed: int | None = None) -> None:
        generator = np.random.default_rng(seed)
        self.length = length
        self.x = generator.normal(size=(length,)).astype(np.float32)
        noise = generator.normal(scale=0.1, size=(length,)).astype(np.float32)
        self.y = a * self.x + b + noise

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": self.x[index], "y": self.y[index]}


class RegressionModel(torch.nn.Module):
    """`x * a + b` with two scalar float32 parameters; prints the dtypes it sees on its first call,
    as Accelerate's does (its tests read that line).

    Example:
        >>> RegressionModel(a=2, b=1)(torch.tensor([1.0, 2.0])).tolist()  # doctest: +SKIP
        [3.0, 5.0]
    """

    def __init__(self, a: float = 0, b: float = 0, double_output: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(a).float())
        self.b = torch.nn.Parameter(torch.tensor(b).float())
        self.first_batch = True

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        if x is None:
            raise ValueError("RegressionModel(x=None): give the input tensor x.")
        if self.first_batch:
            print(f"Model dtype: {self.a.dtype}, {self.b.dtype}. Input dtype: {x.dtype}")
            self.first_batch = False
        return x * self.a + self.b


__all__ = ["RegressionDataset", "RegressionModel"]
