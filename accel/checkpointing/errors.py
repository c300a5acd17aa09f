"""The errors checkpoints raise: one for a checkpoint that cannot be loaded, one for a failed write."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded: not a checkpoint, damaged, unsafe, newer, or for another setup.

    It is raised before anything is restored, so the training state is left as it was; the one
    exception is a prepared object whose own load_state_dict fails midway, which the message names.
    """


class CheckpointWriteError(OSError):
    """save_state could not write a file or folder (no permission, full disk, ...).

    The message names the path. The previous checkpoint, if any, is untouched.
    """


class CheckpointNotPublishedError(CheckpointWriteError):
    """A sharded save_state wrote every process's files, but the process that publishes the
    checkpoint cannot see some of them where the manifest would list them (each machine wrote to
    its own disk, say). The message names the processes and files; nothing was published.
    """
