"""TorchDynamoPlugin: Accelerate's torch.compile options. accel does not compile models yet, so
only the backend "no" is accepted; anything else raises at construction with what to do."""

from __future__ import annotations

from typing import Any

from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler


@kwargs_handler()
class TorchDynamoPlugin(KwargsHandler):
    """torch.compile's options (Accelerate's fields); `backend` must be "no" for now."""

    backend: Any = "no"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    options: Any = None
    disable: bool = False

    def __post_init__(self) -> None:
        name = str(getattr(self.backend, "value", self.backend)).lower()
        if name != "no":
            raise ValueError(
                f"TorchDynamoPlugin(backend={self.backend!r}) is not supported yet: accel does not compile models. "
                "Use backend='no' (or leave the plugin out), and call torch.compile(model) yourself before "
                "prepare() if you want compilation."
            )
