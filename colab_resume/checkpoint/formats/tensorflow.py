"""TensorFlow's own checkpoint format (``tf.train.Checkpoint``) for a state's groups.

Written only where a group is an opaque TensorFlow trackable that is not
made of variables, or where ``checkpoint_format="tensorflow"`` asks for it;
read for checkpoints earlier versions wrote in it. The groups themselves
are :mod:`colab_resume.checkpoint.groups`'; the portable format is
:mod:`colab_resume.checkpoint.formats.portable`. Its options (an I/O
device for a remote TPU, TensorFlow's async write, its shard size) are
made here: nothing else of the checkpoint code knows them.

The one module of ``checkpoint/`` that imports TensorFlow, lazily:
importing the package must not pay for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from colab_resume.checkpoint.formats.base import FormatSettings
from colab_resume.checkpoint.groups import (
    StateLike,
    build_pending_optimizers,
    describe,
    expand,
    metrics_pending,
    variable_list,
)
from colab_resume.checkpoint.structure import check_fits, same_objects


def _tf_variable(variable: Any) -> Any:
    """See :func:`colab_resume.backend.tensorflow.tf_variable`."""
    from colab_resume.backend.tensorflow import tf_variable

    return tf_variable(variable)


def save_options(io_device: str | None, async_write: bool, shard_bytes: int) -> Any:
    """``tf.train.CheckpointOptions`` for a write."""
    import tensorflow as tf

    kwargs: dict[str, Any] = {"experimental_io_device": io_device}
    if async_write:
        kwargs["experimental_enable_async_checkpoint"] = True
    policy = getattr(tf.train.experimental, "MaxShardSizePolicy", None)
    if policy is not None:
        kwargs["experimental_sharding_callback"] = policy(max_shard_size=shard_bytes)
    return tf.train.CheckpointOptions(**kwargs)


def restore_options(io_device: str | None) -> Any:
    """``tf.train.CheckpointOptions`` for a read."""
    import tensorflow as tf

    return tf.train.CheckpointOptions(experimental_io_device=io_device)


class TrainingState:
    """The trackables of one training setup, ready to write or read.

    Args:
        state: a ``keras.Model`` (with its optimizer and metrics) or a mapping
            of name to trackable.
        io_device: ``experimental_io_device`` (a remote TPU's host reads and
            writes the files), or None.
        write_behind: TensorFlow's async checkpointing (the write finishes
            in :meth:`sync`).
        shard_bytes: TensorFlow's largest data file, where it can bound it.
    """

    def __init__(
        self,
        state: StateLike,
        *,
        io_device: str | None = None,
        write_behind: bool = False,
        shard_bytes: int = 32 << 20,
    ) -> None:
        self.source = state
        self.io_device = io_device
        self._write_options = (io_device, write_behind, shard_bytes)
        self._setup()

    def _setup(self) -> None:
        import tensorflow as tf

        state = self.source
        self._groups: dict[str, Any] = {}
        self.structure: dict[str, Any] = {}
        children: dict[str, Any] = {}
        for group, obj in expand(state).items():
            variables = variable_list(obj)
            if variables is None:
                self._groups[group] = obj
                self.structure[group] = f"object:{type(obj).__name__}"
                children[group] = obj
            else:
                self._groups[group] = variables
                self.structure[group] = [describe(v) for v in variables]
                children[group] = {
                    f"{i:06d}": _tf_variable(v) for i, v in enumerate(variables)
                }
        self._children = children
        # One Checkpoint object for the life of this state: TF's async
        # checkpointing keeps its writer thread on it.
        self.checkpoint = tf.train.Checkpoint(**children)

    def outdated(self) -> bool:
        """True once the state's variables are not the ones this object lists.

        See :func:`same_objects`: slots built, metrics built, or a recompile.
        """
        now: dict[str, Any] = {}
        for group, obj in expand(self.source).items():
            variables = variable_list(obj)
            now[group] = obj if variables is None else variables
        return not same_objects(self._groups, now)

    @property
    def nbytes(self) -> int:
        """Approximate bytes of the variables (opaque trackables excluded)."""
        total = 0
        for variables in self._groups.values():
            if isinstance(variables, list):
                for v in variables:
                    total += int(v.shape.num_elements() or 0) * v.dtype.size
        return total

    def write(self, prefix: str) -> None:
        """Write the checkpoint files ``prefix.index`` / ``prefix.data-*``."""
        self.checkpoint.write(prefix, options=save_options(*self._write_options))

    def write_part(self, prefix: str) -> None:
        """Nothing: TensorFlow's own format is written by one process."""

    def sync(self) -> None:
        """Wait for an asynchronous write to reach the local disk."""
        sync = getattr(self.checkpoint, "sync", None)
        if sync is not None:
            sync()

    def committed(self) -> None:
        """Nothing: TensorFlow's writer needs no setup between saves."""

    def objects(self) -> tuple[None, list[Any]]:
        """None: TensorFlow's files hold every array, every time (its
        checkpoint cannot leave some out), so ``frozen`` does not apply."""
        return None, []

    def forget_objects(self) -> None:
        """Nothing: this format writes no shared objects."""

    def restore(
        self,
        prefix: str,
        saved: dict[str, Any],
        files: Sequence[Any] | None = None,
        arrived: Callable[[str], dict[str, Any] | None] | None = None,
        objects: Any = None,
    ) -> list[str]:
        """Read ``prefix`` into the live variables.

        Args:
            prefix: local checkpoint prefix.
            saved: the structure recorded in the manifest.
            files: the manifest's file entries; unused: TensorFlow's reader
                checks each tensor against the CRC32C its index records.
            arrived: blocks until a file of ``files`` is on local disk and
                verified; TensorFlow reads the files as one, so it waits
                for all of them before reading.
            objects: unused: this format writes no shared objects.

        Returns:
            Optional groups that were skipped because they did not match.

        Raises:
            StructureMismatchError: a required group differs.
        """
        import tensorflow as tf

        if build_pending_optimizers(self.source, self.structure, saved):
            self._setup()
        skipped = check_fits(
            self.structure, saved, metrics_pending=metrics_pending(self.source)
        )
        if skipped:
            children = {k: v for k, v in self._children.items() if k not in skipped}
            reader = tf.train.Checkpoint(**children)
        else:
            reader = self.checkpoint  # reuses TF's cached restore functions
        if arrived is not None:
            for entry in files or ():
                arrived(entry.name)
        status = reader.read(prefix, options=restore_options(self.io_device))
        status.expect_partial()
        status.assert_existing_objects_matched()
        return skipped


@dataclasses.dataclass(frozen=True)
class TensorFlowFormat:
    """See :class:`colab_resume.checkpoint.formats.Format`."""

    name: str = "tensorflow"
    # TensorFlow reads its files as one: after every one has arrived.
    reads_while_arriving: bool = False

    def writer(self, state: StateLike, settings: FormatSettings) -> TrainingState:
        return TrainingState(
            state,
            io_device=settings.io_device,
            write_behind=settings.write_behind,
            shard_bytes=settings.shard_bytes,
        )

    def reader(
        self, state: StateLike, settings: FormatSettings, writer: Any = None
    ) -> TrainingState:
        if isinstance(writer, TrainingState):
            return writer
        return TrainingState(state, io_device=settings.io_device)

    def read_file(self, path: str, entry: Any, tensors: int) -> Any:
        return None


FORMAT = TensorFlowFormat()
