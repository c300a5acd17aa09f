"""The stand-in's answer for a name it does not have: an AttributeError that says so.

transformers believes torchvision is installed once it can find the module (it does not read the
package metadata), and then imports `torchvision.io` and `torchvision.transforms.v2.functional`
at import time, keeping them for its video decoding and "fast" image processors, which the
fixtures never use. Those modules exist here, empty; reading anything from them raises this
error (and `from ... import name` turns it into an ImportError), so a use is loud, never a guess.
"""

from __future__ import annotations

from typing import NoReturn


def missing(module: str, name: str) -> NoReturn:
    """Raise for `module.name`, which the torchvision stand-in does not provide."""
    raise AttributeError(f"{module}.{name} is not in the torchvision stand-in of tests/real_scripts (it provides only "
                         "what the fixtures use: see tests/real_scripts/README.md); install a torchvision that matches "
                         "this torch to run code that needs it")
