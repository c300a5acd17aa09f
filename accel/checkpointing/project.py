"""ProjectConfiguration: the project's folders, and where automatic checkpoints go and how many are kept."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from accel._validation import check_bool
from accel.settings import ASYNC_SAVE


@dataclasses.dataclass
class ProjectConfiguration:
    """The project's folders and checkpoint policy, given as `Accelerator(project_config=...)`.

    Accelerate's fields, order and meanings. Like Accelerate's it is mutable (scripts set
    `accelerator.project_configuration.iteration`); every value is checked when set, at
    construction and afterwards. Folders are normalised to `pathlib.Path`.

    With a `project_dir`, `save_state()` writes `project_dir/checkpoints/checkpoint_<iteration>`
    and `load_state()` loads the newest of them. One difference from Accelerate:
    `automatic_checkpoint_naming` defaults to True, because with False Accelerate's
    `save_state()` without a folder fails; an explicit `save_state(folder)` always writes there.
    """

    project_dir: str | None = None
    """The project's folder; automatic checkpoints go to its `checkpoints` subfolder."""
    logging_dir: str | None = None
    """Where trackers write their logs; None: `project_dir`."""
    automatic_checkpoint_naming: bool = True
    """False: `save_state()` needs an explicit folder even with a project_dir (Accelerate's default)."""
    total_limit: int | None = None
    """Keep at most this many automatic checkpoints, deleting the oldest first; None keeps all."""
    iteration: int = 0
    """The number the next automatic checkpoint gets (checkpoint_<iteration>); each save adds one,
    and loading an automatic checkpoint continues after it."""
    save_on_each_node: bool = False
    """Write checkpoints on the first process of every machine rather than only on the main one
    (for machines that do not share a file system). Not supported on several machines yet."""
    async_save: bool = dataclasses.field(default_factory=lambda: ASYNC_SAVE.from_env())
    """accel only: `save_state()` copies the state to CPU memory and writes it in the background
    (save_state(async_save=...) decides per call). Default: config key / ACCEL_ASYNC_SAVE, else False."""

    def __setattr__(self, name: str, value: Any) -> None:
        check = _CHECKS.get(name)
        super().__setattr__(name, check(value) if check is not None else value)

    def __post_init__(self) -> None:
        self.set_directories(self.project_dir)

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set `project_dir`, and `logging_dir` to it when no logging_dir was given (Accelerate's method).

        Args:
            project_dir: The project's folder (a str or path, stored as a str), or None.
        """
        self.project_dir = project_dir  # type: ignore[assignment]  # __setattr__ checks it and stores a str
        if self.logging_dir is None:
            self.logging_dir = self.project_dir

    @property
    def checkpoints_dir(self) -> Path | None:
        """The folder holding automatic checkpoints, or None without a project_dir."""
        return None if self.project_dir is None else Path(self.project_dir) / "checkpoints"


def check_folder(argument: str, value: object) -> Path:
    """Return `value` as a Path, or raise naming `argument` when it is not a non-empty path."""
    if isinstance(value, (str, os.PathLike)) and str(os.fspath(value)):
        return Path(value)
    raise TypeError(f"{argument}={value!r} is not accepted: give a folder path (a str or pathlib.Path).")


def _optional_folder(field: str) -> Any:
    """Checks a folder field and keeps it as a str, as Accelerate's fields are (scripts join them to strings)."""
    return lambda value: None if value is None else str(check_folder(f"ProjectConfiguration.{field}", value))


def _check_total_limit(limit: Any) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(
            f"ProjectConfiguration.total_limit={limit!r} is not accepted: give an int >= 1 (the number of "
            "automatic checkpoints to keep), or None to keep every checkpoint."
        )
    return limit


def _check_iteration(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"ProjectConfiguration.iteration={value!r} is not accepted: give an int >= 0 (the number of the next "
            "automatic checkpoint, checkpoint_<iteration>)."
        )
    return value


def _check_save_on_each_node(value: Any) -> bool:
    from accel.distributed.process_group import read_layout

    check_bool("ProjectConfiguration.save_on_each_node", value)
    layout = read_layout(os.environ) if value else None
    if layout is not None and layout.world_size > layout.local_world_size:
        raise ValueError(
            "ProjectConfiguration.save_on_each_node=True is not supported: this run spans several machines "
            f"({layout.world_size} processes, {layout.local_world_size} on this one), and accel writes every "
            "checkpoint from the main process only, atomically, on a file system all machines must share. Put "
            "project_dir on a shared file system and drop save_on_each_node."
        )
    return value


_CHECKS: dict[str, Any] = {
    "project_dir": _optional_folder("project_dir"),
    "logging_dir": _optional_folder("logging_dir"),
    "automatic_checkpoint_naming": lambda value: check_bool("ProjectConfiguration.automatic_checkpoint_naming", value),
    "total_limit": _check_total_limit,
    "iteration": _check_iteration,
    "save_on_each_node": _check_save_on_each_node,
    "async_save": lambda value: check_bool("ProjectConfiguration.async_save", value),
}
"""How each field's value is checked (and normalised) whenever it is set."""


def resolve_project_configuration(
    project_config: ProjectConfiguration | None, project_dir: str | os.PathLike[str] | None
) -> ProjectConfiguration:
    """Merge `Accelerator(project_config=..., project_dir=...)`: `project_dir` is a shortcut for
    `ProjectConfiguration(project_dir=...)`, and fills in a configuration that has none (through
    `set_directories`, as Accelerate does: the Accelerator keeps the object it was given)."""
    if project_config is not None and not isinstance(project_config, ProjectConfiguration):
        raise TypeError(
            f"Accelerator(project_config={project_config!r}) is not accepted: give a ProjectConfiguration "
            "(from accel import ProjectConfiguration) or None."
        )
    config = project_config if project_config is not None else ProjectConfiguration()
    if project_dir is None:
        return config
    folder = check_folder("Accelerator.project_dir", project_dir)
    if config.project_dir is not None and Path(config.project_dir) != folder:
        raise ValueError(
            f"Accelerator got project_dir={str(folder)!r} and project_config with "
            f"project_dir={str(config.project_dir)!r}: two different folders for one project. Give it once."
        )
    config.set_directories(folder)
    return config
