"""The checkpoint formats behind one protocol, and which one writes or reads.

Two formats exist. The *portable* one (:mod:`colab_resume.checkpoint.arrays`,
safetensors shards of host arrays) is written by both backends and read by
both: a run moves between TensorFlow and JAX, replica counts and precision
policies. TensorFlow's own ``tf.train.Checkpoint`` format
(:class:`~colab_resume.checkpoint.state.TrainingState`) is written only
where a state group is an opaque TensorFlow trackable that is not made of
variables, or where ``checkpoint_format="tensorflow"`` asks for it; the
TensorFlow backend keeps reading checkpoints written in it by earlier
versions. Which format a checkpoint is in is told by its files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from colab_resume import backend
from colab_resume.checkpoint.arrays import (
    ArrayState,
    NotPortableError,
    is_array_checkpoint,
)
from colab_resume.checkpoint.errors import StructureMismatchError
from colab_resume.checkpoint.groups import StateLike
from colab_resume.checkpoint.state import TrainingState
from colab_resume.protocol.manifest import FileEntry

PORTABLE = "portable"
TENSORFLOW = "tensorflow"
FORMATS = (PORTABLE, TENSORFLOW)


class StateFiles(Protocol):
    """One training state as checkpoint files in one format.

    Made once per state and reused across saves until :meth:`outdated`; the
    manager writes through it, the restore reads through it. Implemented by
    :class:`~colab_resume.checkpoint.arrays.ArrayState` (portable) and
    :class:`~colab_resume.checkpoint.state.TrainingState` (TensorFlow's).

    Attributes:
        source: the state it lists (a model, a model with extras, a mapping).
        structure: group -> ``[name, shape, dtype]`` per variable (or
            ``"object:<type>"`` for an opaque trackable), as the manifest
            records it.
    """

    source: StateLike
    structure: dict[str, Any]

    def outdated(self) -> bool:
        """True once the state's variables are not the ones listed."""
        ...

    @property
    def nbytes(self) -> int:
        """Approximate bytes of the variables."""
        ...

    def write(self, prefix: str, options: Any) -> None:
        """Take what a save needs now (the training thread waits for this)."""
        ...

    def sync(self) -> None:
        """Finish the files on local disk (the upload thread calls this)."""
        ...

    def restore(
        self,
        prefix: str,
        saved: dict[str, Any],
        options: Any,
        files: Sequence[FileEntry] | None = None,
        arrived: Callable[[str], dict[str, Any] | None] | None = None,
    ) -> list[str]:
        """Read the files at ``prefix`` into the live variables; the optional
        groups skipped because they did not fit.

        ``arrived(name)``, where given, blocks until file ``name`` of
        ``files`` is on local disk and verified (the others may still be
        downloading); it is called for every file before anything is
        assigned."""
        ...


def for_saving(
    state: StateLike, *, format: str, shard_bytes: int, write_behind: bool
) -> tuple[StateFiles, str | None]:
    """The writer of ``state``'s checkpoints.

    Returns:
        The writer, and why it is not the portable one (None when it is).

    Raises:
        NotPortableError: on JAX, a group is not made of variables.
    """
    only_portable = backend.current().portable_only
    portable = only_portable or format == PORTABLE
    if portable:
        try:
            return ArrayState(
                state, shard_bytes=shard_bytes, write_behind=write_behind
            ), None
        except NotPortableError as exc:
            if only_portable:
                raise
            why = (
                f"{exc} This run's checkpoints use TensorFlow's own format: "
                f"only the TensorFlow backend can continue it."
            )
            return TrainingState(state), why
    return TrainingState(state), None


def for_reading(
    state: StateLike, writer: StateFiles | None, file_names: list[str]
) -> StateFiles:
    """The reader of a checkpoint made of ``file_names``, reusing ``writer``.

    Raises:
        StructureMismatchError: the checkpoint's format cannot be read into
            this state on this backend.
    """
    if is_array_checkpoint(file_names):
        if isinstance(writer, ArrayState):
            return writer
        try:
            return ArrayState(state)
        except NotPortableError as exc:
            raise StructureMismatchError(
                f"The checkpoint holds host arrays, but {exc}"
            ) from None
    if backend.current().portable_only:
        raise StructureMismatchError(
            "This checkpoint is in TensorFlow's own format (written by a "
            "TensorFlow session with an opaque trackable in its state, by "
            "checkpoint_format='tensorflow', or by an earlier version); the "
            "JAX backend reads only portable checkpoints. Continue this run "
            "with KERAS_BACKEND=tensorflow, or start a new run_dir."
        )
    if isinstance(writer, TrainingState):
        return writer
    return TrainingState(state)


def describe_format(writer: Any) -> str:
    return PORTABLE if isinstance(writer, ArrayState) else TENSORFLOW
