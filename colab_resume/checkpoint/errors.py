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


class DamagedCheckpointError(CheckpointError):
    """A checkpoint's files disagree with its own manifest: damage.

    Told apart from :class:`StructureMismatchError` on purpose. The manifest
    disagreeing with the model being restored is the user's change of model,
    and an older checkpoint would not fit either: an error. A file
    disagreeing with the manifest that committed it (a tensor missing, of
    another shape or dtype, a header that is not the one written) is
    damage: restore falls back to the next older checkpoint with a warning.
    """


class DamagedObjectError(DamagedCheckpointError):
    """A shared object a checkpoint references is missing or damaged.

    Attributes:
        name: the object (``<sha256>.safetensors`` under ``objects/``).
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"shared object objects/{name}: {reason}")
        self.name = name


class FrozenArraysChangedError(StructureMismatchError):
    """``frozen="rebuild"``: the frozen arrays ``build_model()`` made are not
    the ones the checkpoint was trained on (another preset version, another
    seed, a changed ``build_model``), and no stored copy exists.

    Attributes:
        differ: the tensor names (``model/000003``) whose arrays differ;
            empty when the presets alone decided (no array was compared).
        trained_on: the keras-hub presets the checkpoint was trained on,
            where it names them.
        loaded: those ``build_model()`` loaded this time, where known.
    """

    def __init__(
        self,
        message: str,
        differ: list[str],
        *,
        trained_on: tuple[str, ...] = (),
        loaded: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.differ = differ
        self.trained_on = trained_on
        self.loaded = loaded
