"""A stand-in for torchvision, for the real-script tests only: just `torchvision.transforms`.

torchvision's wheels must match the installed torch build exactly, and where none matches (a CPU
torch with only CUDA torchvision wheels at its version) it cannot be installed without replacing
torch. The fixtures that import it (diffusers' train_unconditional) use a handful of PIL/tensor
transforms, written here with PIL and torch; tests/real_scripts puts this folder on PYTHONPATH for
those runs only, and only where the real torchvision cannot be imported. Both frameworks' runs get
the same stand-in, so the comparison stays fair.

There is deliberately no `*.dist-info` beside it: libraries that ask the package metadata whether
torchvision is installed (diffusers' `is_torchvision_available`, `importlib.metadata.version`) are
told it is not, and do not reach for the parts of torchvision (`io`, `ops`, `models`) missing here.
"""

__version__ = "0.0.0+standin"
