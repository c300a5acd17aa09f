"""ProjectConfiguration: where automatic checkpoints go and how many are kept."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from accel._validation import check_bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProjectConfiguration:
    """The project's folder and checkpoint policy, given as `Accelerator(project_config=...)`.

    With a `project_dir`, `save_state()` writes `project_dir/checkpoints/checkpoint_<n>` and
    `load_state()` loads the newest of them. `project_dir` is normalised to a `pathlib.Path`.
    """

    project_dir: Path | str | None = None
    """The project's folder; automatic checkpoints go to its `checkpoints` subfolder."""
    total_limit: int | None = None
    """Keep at most this many automatic checkpoints, deleting the oldest first; None keeps all."""
    automatic_checkpoint_naming: bool = True
    """False: `save_state()` needs an explicit folder even with a project_dir (Accelerate's default)."""

    def __post_init__(self) -> None:
        if self.project_dir is not None:
            object.__setattr__(self, "project_dir", check_folder("ProjectConfiguration.project_dir", self.project_dir))
        limit = self.total_limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(
                f"ProjectConfiguration.total_limit={limit!r} is not accepted: give an int >= 1 (the number of "
                "automatic checkpoints to keep), or None to keep every checkpoint."
            )
        check_bool("ProjectConfiguration.automatic_checkpoint_naming", self.automatic_checkpoint_naming)

    @property
    def checkpoints_dir(self) -> Path | None:
        """The folder holding automatic checkpoints, or None without a project_dir."""
        return None if self.project_dir is None else Path(self.project_dir) / "checkpoints"


def check_folder(argument: str, value: object) -> Path:
    """Return `value` as a Path, or raise naming `argument` when it is not a non-empty path."""
    if isinstance(value, (str, os.PathLike)) and str(os.fspath(value)):
        return Path(value)
    raise TypeError(f"{argument}={value!r} is not accepted: give a folder path (a str or pathlib.Path).")


def resolve_project_configuration(
    project_config: ProjectConfiguration | None, project_dir: str | os.PathLike[str] | None
) -> ProjectConfiguration:
    """Merge `Accelerator(project_config=..., project_dir=...)`: `project_dir` is a shortcut for
    `ProjectConfiguration(project_dir=...)`, and fills in a configuration that has none."""
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
    return dataclasses.replace(config, project_dir=folder)
