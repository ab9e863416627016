"""Errors of the checkpoint package; each message names the problem and the fix."""

from __future__ import annotations

from colab_resume.errors import ColabResumeError


class CheckpointError(ColabResumeError):
    """A checkpoint could not be written, verified or restored."""


class NoValidCheckpointError(CheckpointError):
    """Checkpoints exist but every one of them is damaged.

    Raised instead of starting from scratch, which would silently throw the
    run's progress away.
    """


class StructureMismatchError(CheckpointError, ValueError):
    """The checkpoint's variables do not match the model being restored."""
