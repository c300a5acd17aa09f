"""The functions behind the stand-in's transforms, named as torchvision's `transforms.functional`.

transformers decides that torchvision is installed by finding the module (not by its metadata),
and its `image_utils` then imports `InterpolationMode` and `functional.pil_to_tensor` at import
time, so these two names must exist here for `import transformers` (reached through diffusers
and peft) to work with the stand-in on the path. The rest serves the transform classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import numpy as np
import torch
from PIL import Image


class InterpolationMode(Enum):
    """The resampling filters, named as torchvision names them."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


_PIL_FILTERS = {
    InterpolationMode.NEAREST: Image.Resampling.NEAREST, InterpolationMode.NEAREST_EXACT: Image.Resampling.NEAREST,
    InterpolationMode.BILINEAR: Image.Resampling.BILINEAR, InterpolationMode.BICUBIC: Image.Resampling.BICUBIC,
    InterpolationMode.BOX: Image.Resampling.BOX, InterpolationMode.HAMMING: Image.Resampling.HAMMING,
    InterpolationMode.LANCZOS: Image.Resampling.LANCZOS,
}
_TENSOR_MODES = {InterpolationMode.NEAREST: "nearest", InterpolationMode.NEAREST_EXACT: "nearest-exact",
                 InterpolationMode.BILINEAR: "bilinear", InterpolationMode.BICUBIC: "bicubic"}

ImageLike = Image.Image | torch.Tensor


def pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """(height, width) from an int or a one- or two-element sequence, as torchvision reads sizes."""
    if isinstance(size, int):
        return size, size
    if len(size) in (1, 2):
        return size[0], size[-1]
    raise ValueError(f"{name}: size {size!r} must be an int or a sequence of one or two ints")


def get_dimensions(image: ImageLike) -> tuple[int, int]:
    """(height, width) of a PIL image or a (..., H, W) tensor."""
    if isinstance(image, Image.Image):
        return image.height, image.width
    return int(image.shape[-2]), int(image.shape[-1])


def _pil_array(image: Image.Image) -> np.ndarray:
    if image.mode not in ("L", "RGB", "RGBA"):
        raise NotImplementedError(f"the torchvision stand-in reads 8-bit L/RGB/RGBA images, not mode {image.mode!r}")
    array = np.array(image, dtype=np.uint8, copy=True)
    return array[:, :, None] if array.ndim == 2 else array


def pil_to_tensor(image: Image.Image) -> torch.Tensor:
    """A PIL image as a uint8 CHW tensor, values unchanged."""
    return torch.from_numpy(_pil_array(image)).permute(2, 0, 1).contiguous()


def to_tensor(image: Image.Image | np.ndarray) -> torch.Tensor:
    """A PIL image (or HWC array) as a CHW tensor; 8-bit values scaled to float32 in [0, 1]."""
    array = _pil_array(image) if isinstance(image, Image.Image) else image
    if array.ndim == 2:
        array = array[:, :, None]
    tensor = torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1).contiguous()
    return tensor.to(torch.float32).div(255) if tensor.dtype == torch.uint8 else tensor


def convert_image_dtype(image: torch.Tensor, dtype: torch.dtype = torch.float) -> torch.Tensor:
    """An integer image tensor as floats in [0, 1] (the one conversion the fixtures use)."""
    if image.dtype == dtype:
        return image
    if image.dtype.is_floating_point or not dtype.is_floating_point:
        raise NotImplementedError(f"convert_image_dtype from {image.dtype} to {dtype} is not in the stand-in")
    return image.to(dtype).div(torch.iinfo(image.dtype).max)


def crop(image: ImageLike, top: int, left: int, height: int, width: int) -> ImageLike:
    """The `height` x `width` region at (`top`, `left`); the stand-in does not pad."""
    image_height, image_width = get_dimensions(image)
    if top < 0 or left < 0 or top + height > image_height or left + width > image_width:
        raise ValueError(f"crop of {height}x{width} at ({top}, {left}) does not fit a {image_height}x{image_width} "
                         "image (the torchvision stand-in does not pad)")
    if isinstance(image, Image.Image):
        return image.crop((left, top, left + width, top + height))
    return image[..., top:top + height, left:left + width]


def center_crop(image: ImageLike, size: int | Sequence[int]) -> ImageLike:
    """The central `size` region, its offsets rounded as torchvision rounds them."""
    height, width = get_dimensions(image)
    crop_height, crop_width = pair(size, "center_crop")
    top, left = int(round((height - crop_height) / 2.0)), int(round((width - crop_width) / 2.0))
    return crop(image, top, left, crop_height, crop_width)


def resized_size(height: int, width: int, size: int | Sequence[int]) -> tuple[int, int]:
    """The output (height, width): an int (or one-element size) sets the shorter edge, keeping the ratio."""
    if isinstance(size, int) or len(size) == 1:
        short = size if isinstance(size, int) else size[0]
        if height <= width:
            return short, int(short * width / height)
        return int(short * height / width), short
    return pair(size, "resize")


def resize(image: ImageLike, size: int | Sequence[int],
           interpolation: InterpolationMode = InterpolationMode.BILINEAR, antialias: bool = True) -> ImageLike:
    """`image` resized to `size` (the input itself when it already has that size, as in torchvision)."""
    height, width = get_dimensions(image)
    output = resized_size(height, width, size)
    if output == (height, width):
        return image
    interpolation = InterpolationMode(interpolation)
    if isinstance(image, Image.Image):
        return image.resize((output[1], output[0]), _PIL_FILTERS[interpolation])
    batched = image if image.ndim == 4 else image.unsqueeze(0)
    smooth = antialias and interpolation in (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC)
    result = torch.nn.functional.interpolate(batched.float(), size=output, mode=_TENSOR_MODES[interpolation],
                                             antialias=smooth)
    result = result.to(image.dtype) if image.dtype.is_floating_point else result.round().to(image.dtype)
    return result if image.ndim == 4 else result.squeeze(0)


def hflip(image: ImageLike) -> ImageLike:
    """`image` mirrored left-right."""
    if isinstance(image, Image.Image):
        return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return image.flip(-1)


def normalize(image: torch.Tensor, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> torch.Tensor:
    """(image - mean) / std per channel of a float CHW tensor (one-element mean/std broadcast)."""
    if not image.is_floating_point():
        raise TypeError(f"normalize expects a float tensor, got {image.dtype}")
    mean_t = torch.as_tensor(mean, dtype=image.dtype, device=image.device).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=image.dtype, device=image.device).view(-1, 1, 1)
    return image.sub_(mean_t).div_(std_t) if inplace else image.sub(mean_t).div(std_t)
