"""Reading torch.distributed.checkpoint folders without running code from them.

torch's own reader unpickles `.metadata` with `pickle.load` and its planner reads every
non-tensor value (an optimizer's `lr`, `betas`, ...) with `torch.load(weights_only=False)`:
a crafted file could run code. Here the index is unpickled with an allow-list of the classes
torch writes into it (DCP's metadata dataclasses, torch.Size, dtypes, paths), and non-tensor
values with `torch.load(weights_only=True)`. Anything else is refused, nothing of it runs.

    reader = SafeReader(folder)
    dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner())
"""

from __future__ import annotations

import io
import os
import pickle
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

_METADATA_CLASSES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "TensorStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING", "ChunkStorageMetadata",
        "BytesStorageMetadata", "MetadataIndex", "StorageMeta",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}
"""The globals a DCP `.metadata` file refers to (torch 2.4 to 2.13), besides torch's dtypes."""


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint file refers to something other than the data torch.distributed.checkpoint writes."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if name in _METADATA_CLASSES.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeCheckpointError(
            f"the index refers to {module}.{name}, which torch.distributed.checkpoint never writes there; it was "
            "refused unrun"
        )


def read_metadata(folder: str | os.PathLike[str]) -> Metadata:
    """The `.metadata` index of the checkpoint in `folder`, unpickled with the allow-list above."""
    with open(os.path.join(folder, ".metadata"), "rb") as file:
        metadata = _MetadataUnpickler(file).load()
    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpointError(f"the index holds a {type(metadata).__name__}, not torch's checkpoint Metadata")
    return metadata


class SafeReader(dcp.FileSystemReader):
    """torch's FileSystemReader, whose index is read by `read_metadata` (no code runs)."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        if kwargs.get("rank") is not None:
            raise UnsafeCheckpointError("per-rank index files are not written by accel; refused")
        metadata = read_metadata(self.path)
        storage_meta = getattr(metadata, "storage_meta", None)
        if storage_meta is None:
            storage_meta = metadata.storage_meta = StorageMeta()
        storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """torch's DefaultLoadPlanner, reading non-tensor values with torch.load(weights_only=True)."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        safe = torch.load(value, weights_only=True)
        again = io.BytesIO()
        torch.save(safe, again)  # what torch's planner unpickles is now this plain value, written here
        again.seek(0)
        super().load_bytes(read_item, again)
