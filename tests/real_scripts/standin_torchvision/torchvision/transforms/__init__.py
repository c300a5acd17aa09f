"""The torchvision transforms the real-script fixtures use, on PIL images and on tensors.

Each behaves as torchvision's does for the arguments the fixtures pass (tests/real_scripts/
README.md): `Resize` sets the shorter edge (PIL's resampling for images, `interpolate` for
tensors) and returns its input when the size is already right; `CenterCrop` rounds its offsets as
torchvision does; `RandomCrop` draws its offsets with `torch.randint` and `RandomHorizontalFlip`
draws `torch.rand(1)`, from torch's global generator as torchvision's do, so a seeded run repeats;
`ToTensor` scales 8-bit images to float32 CHW in [0, 1]; `Normalize` works per channel. What a
fixture does not use (padding, `max_size`, other conversions) raises instead of guessing.

Example:
    >>> from torchvision import transforms
    >>> pipeline = transforms.Compose([transforms.CenterCrop(16), transforms.ToTensor()])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from . import functional
from .functional import ImageLike, InterpolationMode

__all__ = [
    "CenterCrop", "Compose", "ConvertImageDtype", "InterpolationMode", "Lambda", "Normalize", "PILToTensor",
    "RandomCrop", "RandomHorizontalFlip", "Resize", "ToTensor", "functional",
]


class Compose:
    """Apply `transforms` in order."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, image: Any) -> Any:
        for transform in self.transforms:
            image = transform(image)
        return image


class Lambda:
    """Apply a user function."""

    def __init__(self, lambd: Callable[[Any], Any]) -> None:
        if not callable(lambd):
            raise TypeError(f"Lambda: {lambd!r} is not callable")
        self.lambd = lambd

    def __call__(self, image: Any) -> Any:
        return self.lambd(image)


class Resize:
    """Resize to `size`: an int sets the shorter edge (the aspect ratio kept), a pair sets (height, width)."""

    def __init__(self, size: int | Sequence[int], interpolation: InterpolationMode = InterpolationMode.BILINEAR,
                 max_size: int | None = None, antialias: bool = True) -> None:
        if max_size is not None:
            raise NotImplementedError("Resize(max_size=...) is not in the torchvision stand-in")
        self.size, self.interpolation, self.antialias = size, InterpolationMode(interpolation), antialias

    def __call__(self, image: ImageLike) -> ImageLike:
        return functional.resize(image, self.size, self.interpolation, self.antialias)


class CenterCrop:
    """The central `size` region."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = functional.pair(size, "CenterCrop")

    def __call__(self, image: ImageLike) -> ImageLike:
        return functional.center_crop(image, self.size)


class RandomCrop:
    """A `size` region at offsets drawn with `torch.randint` (none drawn when the image has that size)."""

    def __init__(self, size: int | Sequence[int], padding: Any = None, pad_if_needed: bool = False) -> None:
        if padding is not None or pad_if_needed:
            raise NotImplementedError("RandomCrop padding is not in the torchvision stand-in")
        self.size = functional.pair(size, "RandomCrop")

    def __call__(self, image: ImageLike) -> ImageLike:
        height, width = functional.get_dimensions(image)
        crop_height, crop_width = self.size
        if (height, width) == (crop_height, crop_width):
            return functional.crop(image, 0, 0, height, width)
        top = int(torch.randint(0, height - crop_height + 1, size=(1,)).item())
        left = int(torch.randint(0, width - crop_width + 1, size=(1,)).item())
        return functional.crop(image, top, left, crop_height, crop_width)


class RandomHorizontalFlip:
    """Mirror left-right with probability `p` (one `torch.rand(1)` draw per call)."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, image: ImageLike) -> ImageLike:
        return functional.hflip(image) if torch.rand(1) < self.p else image


class PILToTensor:
    """A PIL image as a uint8 CHW tensor."""

    def __call__(self, image: Any) -> torch.Tensor:
        return functional.pil_to_tensor(image)


class ToTensor:
    """A PIL image (or HWC uint8 array) as a float32 CHW tensor in [0, 1]."""

    def __call__(self, image: Any | np.ndarray) -> torch.Tensor:
        return functional.to_tensor(image)


class ConvertImageDtype:
    """An integer image tensor as `dtype` floats in [0, 1]."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return functional.convert_image_dtype(image, self.dtype)


class Normalize:
    """(image - mean) / std per channel of a float CHW tensor."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        self.mean, self.std, self.inplace = list(mean), list(std), inplace

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return functional.normalize(image, self.mean, self.std, self.inplace)
