"""The manifest: what a checkpoint holds and how to check it is whole (manifest.json)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.layout import SHARDS_DIR
from accel.kwargs_handlers.fsdp_names import STATE_DICT_TYPES

FORMAT = "accel-checkpoint"
FORMAT_VERSION = 2
"""Raised whenever a change would make older accel versions misread a checkpoint. 2: the `fsdp`
field, files under `shards/`, and optimizer states keyed by parameter name when saved under FSDP."""
MANIFEST_NAME = "manifest.json"
CONTENTS = ("models", "optimizers", "schedulers", "dataloaders", "custom_objects")
"""The kinds of objects a checkpoint holds, as counted in the manifest's `contents`."""
MAX_DEPTH = 32
"""How deeply a manifest may nest; accel writes at most 4 levels. Deeper is damage, refused before
anything walks it (deep enough nesting makes json and comparisons raise RecursionError)."""


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """A file of the checkpoint: its size in bytes and its SHA-256, as written."""

    size: int
    sha256: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Manifest:
    """The contents of manifest.json (see docs/checkpoints.md for an example)."""

    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    accel_version: str
    created: str = ""
    iteration: int
    """The save counter: checkpoint_<iteration> for automatic checkpoints."""
    precision: str
    fp8: dict[str, Any] | None
    """{"backend": ..., "recipe": {...}} when the precision runs an FP8 recipe, else None."""
    num_processes: int
    gradient_accumulation: dict[str, Any]
    """{"steps": ..., "micro_batch": position in the window, "sync_gradients": ...}."""
    contents: dict[str, int]
    """How many models, optimizers, schedulers, dataloaders and registered objects were saved."""
    dataloaders: list[dict[str, int]]
    """Each prepared dataloader's position: {"epoch": ..., "batch": ...} (for people; the state is in files)."""
    files: dict[str, FileEntry]
    """Every other file of the checkpoint, with its size and SHA-256 (`shards/...` for a sharded one's)."""
    fsdp: dict[str, Any] | None = None
    """Saved under FSDP: {"state_dict_type": ..., and the plugin's other settings}; else None."""
    process_states: list[int] | None = None
    """The processes whose RNG states and dataloader positions it holds, when not all `num_processes`:
    [0] for a save by the main process alone (inside `if accelerator.is_main_process:`); else None."""

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["files"] = dict(sorted(data["files"].items()))
        return json.dumps(data, indent=2) + "\n"


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "accel_version": str,
    "iteration": int,
    "precision": str,
    "fp8": (dict, type(None)),
    "num_processes": int,
    "gradient_accumulation": dict,
    "contents": dict,
    "dataloaders": list,
    "files": dict,
    "created": str,
    "fsdp": (dict, type(None)),
    "process_states": (list, type(None)),
}


_FIELD_MINIMUMS: dict[str, int] = {"iteration": 0, "num_processes": 1}
"""The least value each integer field can hold in a manifest accel wrote (a save counter, a number of processes)."""


def describe_file(path: Path) -> FileEntry:
    """Size and SHA-256 of the file at `path`."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return FileEntry(size=path.stat().st_size, sha256=digest.hexdigest())


def read_manifest(folder: Path, label: str) -> Manifest:
    """Parse and check `folder`/manifest.json; `label` names the checkpoint in errors."""
    path = folder / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{label}: {MANIFEST_NAME} cannot be read ({exc}); the checkpoint is damaged.") from exc
    except RecursionError:
        raise CheckpointError(
            f"{label}: {MANIFEST_NAME} cannot be read (it nests too deeply for json to parse; accel writes at most "
            f"{MAX_DEPTH} levels); the checkpoint is damaged."
        ) from None
    if _depth(data) > MAX_DEPTH:
        raise CheckpointError(
            f"{label}: {MANIFEST_NAME} nests more than {MAX_DEPTH} levels deep (accel writes at most {MAX_DEPTH}); "
            "the checkpoint is damaged."
        )
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(
            f"{label}: {MANIFEST_NAME} is not an accel checkpoint manifest (no \"format\": {FORMAT!r})."
        )
    version = data.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{label}: {MANIFEST_NAME} has format_version={version!r}; the checkpoint is damaged.")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{label}: written by a newer accel ({data.get('accel_version', '?')}, checkpoint format {version}); "
            f"this accel reads format {FORMAT_VERSION} and older. Upgrade accel to load it."
        )
    return _from_dict(data, label)


def _from_dict(data: dict[str, Any], label: str) -> Manifest:
    for name, kind in _FIELD_TYPES.items():
        _check(label, name, data.get(name), kind)
    for name, least in _FIELD_MINIMUMS.items():
        _check_at_least(label, name, data[name], least)
    for key in CONTENTS:
        _check(label, f"contents.{key}", data["contents"].get(key), int)
        _check_at_least(label, f"contents.{key}", data["contents"][key], 0)
    for key, kind in (("steps", int), ("micro_batch", int), ("sync_gradients", bool)):
        _check(label, f"gradient_accumulation.{key}", data["gradient_accumulation"].get(key), kind)
    _check_window(label, data["gradient_accumulation"])
    _check_fsdp(label, data.get("fsdp"))
    held = data.get("process_states")
    if held is not None and not (held and all(type(r) is int and 0 <= r < data["num_processes"] for r in held)):
        raise CheckpointError(f"{label}: {MANIFEST_NAME} has process_states={held!r}; the checkpoint is damaged.")
    files = {}
    for name, entry in data["files"].items():
        if not _is_plain_name(name) or not isinstance(entry, dict):
            raise CheckpointError(f"{label}: {MANIFEST_NAME} lists a bad file entry {name!r}: {entry!r}.")
        files[name] = FileEntry(size=entry.get("size", -1), sha256=str(entry.get("sha256", "")))
    fields = {f.name for f in dataclasses.fields(Manifest)}
    return Manifest(**{**{k: v for k, v in data.items() if k in fields}, "files": files})


def verify_files(folder: Path, manifest: Manifest, label: str) -> None:
    """Raise CheckpointError naming every file that is missing or differs from the manifest."""
    problems = []
    for name, expected in sorted(manifest.files.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
            continue
        actual = describe_file(path)
        if actual.size != expected.size:
            problems.append(f"{name} has {actual.size} bytes, the manifest says {expected.size}")
        elif actual.sha256 != expected.sha256:
            problems.append(f"{name} differs from what was saved (SHA-256 mismatch)")
    if problems:
        raise CheckpointError(
            f"{label} is damaged or incomplete: " + "; ".join(problems) + ". Load an older checkpoint, "
            "or restore these files from a backup."
        )


def _check(label: str, name: str, value: Any, kind: type | tuple[type, ...]) -> None:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise CheckpointError(
            f"{label}: {MANIFEST_NAME} has {name}={value!r}, not a {_type_names(kind)}; the checkpoint is damaged."
        )


def _check_at_least(label: str, name: str, value: int, least: int) -> None:
    """Refuse an integer field below the least value accel writes, naming the field."""
    if value < least:
        raise CheckpointError(
            f"{label}: {MANIFEST_NAME} has {name}={value!r}, but it must be >= {least}; the checkpoint is damaged."
        )


def _check_window(label: str, accumulation: dict[str, Any]) -> None:
    """The position saved must lie inside the accumulation window: 0 <= micro_batch < steps."""
    steps, micro_batch = accumulation["steps"], accumulation["micro_batch"]
    if steps < 1:
        raise CheckpointError(
            f"{label}: {MANIFEST_NAME} has gradient_accumulation.steps={steps}, but it must be >= 1; "
            "the checkpoint is damaged."
        )
    if not 0 <= micro_batch < steps:
        raise CheckpointError(
            f"{label}: {MANIFEST_NAME} has gradient_accumulation.micro_batch={micro_batch} with steps={steps}, but "
            f"it must be from 0 to steps - 1 = {steps - 1} (its place in the window); the checkpoint is damaged."
        )


def _check_fsdp(label: str, fsdp: dict[str, Any] | None) -> None:
    if fsdp is not None and fsdp.get("state_dict_type") not in STATE_DICT_TYPES:
        raise CheckpointError(
            f"{label}: {MANIFEST_NAME} has fsdp.state_dict_type={fsdp.get('state_dict_type')!r}, not one of "
            f"{', '.join(STATE_DICT_TYPES)}; the checkpoint is damaged."
        )


def _depth(value: Any) -> int:
    """How deeply `value` nests lists and dicts (iteratively: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _is_plain_name(name: str) -> bool:
    """A file directly in the checkpoint folder, or in its `shards/` subfolder (where `.metadata` is)."""
    folder, _, inner = name.rpartition("/")
    if folder:
        return folder == SHARDS_DIR and bool(inner) and Path(inner).name == inner and inner not in (".", "..")
    return bool(name) and Path(name).name == name and not name.startswith(".") and name != MANIFEST_NAME


def _type_names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
