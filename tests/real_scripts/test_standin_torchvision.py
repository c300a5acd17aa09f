"""The torchvision stand-in (standin_torchvision/) computes what torchvision's transforms compute
for the fixtures' arguments, and stays invisible to package metadata.

Checked in a fresh interpreter with the stand-in on its path, so this test session never imports
a `torchvision` that is not the real one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from real_script_standins import MODULE_STANDINS

CHECKS = textwrap.dedent('''
    import importlib.metadata, importlib.util
    import numpy as np, torch
    from PIL import Image
    import torchvision
    from torchvision import transforms
    from torchvision.transforms import functional

    assert torchvision.__file__.startswith(STANDIN), torchvision.__file__
    try:
        importlib.metadata.version("torchvision")
        raise AssertionError("the stand-in must have no package metadata")
    except importlib.metadata.PackageNotFoundError:
        pass

    pixels = np.arange(18 * 20 * 3, dtype=np.uint8).reshape(18, 20, 3)
    image = Image.fromarray(pixels)
    resized = transforms.Resize(16, interpolation=transforms.InterpolationMode.BILINEAR)(image)
    assert resized.size == (17, 16), resized.size  # PIL's (width, height): the shorter edge is 16
    assert np.array_equal(np.array(resized), np.array(image.resize((17, 16), Image.Resampling.BILINEAR)))
    assert transforms.Resize(18)(image) is image  # already the size: returned as it is
    cropped = transforms.CenterCrop(16)(image)
    assert np.array_equal(np.array(cropped), pixels[1:17, 2:18])

    tensor = transforms.ToTensor()(image)
    assert tensor.dtype == torch.float32 and tensor.shape == (3, 18, 20)
    assert torch.equal(tensor, torch.from_numpy(pixels).permute(2, 0, 1).float() / 255)
    assert torch.equal(transforms.PILToTensor()(image), torch.from_numpy(pixels).permute(2, 0, 1))
    as_float = transforms.ConvertImageDtype(torch.float32)(transforms.PILToTensor()(image))
    assert torch.equal(as_float, tensor)
    normalized = transforms.Normalize([0.5], [0.5])(tensor)
    assert torch.equal(normalized, (tensor - 0.5) / 0.5)
    assert torch.equal(transforms.CenterCrop(16)(tensor), tensor[:, 1:17, 2:18])
    assert transforms.Resize(16)(tensor).shape == (3, 16, 17)

    torch.manual_seed(0)
    first = [transforms.RandomHorizontalFlip()(image).tobytes() for _ in range(8)]
    crops = [transforms.RandomCrop(16)(tensor) for _ in range(8)]
    torch.manual_seed(0)
    assert first == [transforms.RandomHorizontalFlip()(image).tobytes() for _ in range(8)]
    assert all(torch.equal(a, transforms.RandomCrop(16)(tensor)) for a in crops)
    flipped = sum(f != image.tobytes() for f in first)
    assert 0 < flipped < 8, flipped
    assert transforms.Compose([transforms.Lambda(lambda x: x), transforms.ToTensor()])(image).shape == (3, 18, 20)

    from torchvision.io import VideoReader  # missing: an ImportError, as datasets expects
''')


def test_standin_transforms_and_no_metadata() -> None:
    """Resize/CenterCrop/RandomCrop/flip/ToTensor/PILToTensor/ConvertImageDtype/Normalize give
    torchvision's results on an 18x20 image, random draws repeat under a seed, importlib.metadata
    finds no torchvision, and a name the stand-in lacks fails loudly."""
    folder = str(MODULE_STANDINS["torchvision"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", f"STANDIN = {folder!r}\n" + CHECKS], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: cannot import name 'VideoReader' from 'torchvision.io'"), done.stderr
