"""The portable format's state: every variable of a training setup as host arrays.

Both backends write it and both read it, so a run continues on TensorFlow
from a checkpoint JAX wrote, and the other way round. Every variable of the
groups :func:`~colab_resume.checkpoint.groups.expand` names (model,
optimizer, metrics, seed generators, extras) is copied to a host NumPy array
and written as a tensor of :mod:`.shards`. The manifest's structure (name,
shape, dtype per position) is the same on both backends.

A save blocks the training thread only for a snapshot of the variables (on
the CPU a reference TensorFlow protects with copy-on-write; elsewhere the
copy to host memory); the shards are serialised and written to local disk
in :meth:`ArrayState.sync`, which the manager calls from its upload thread,
one shard at a time, releasing each shard's snapshot once it is written.

A ``LossScaleOptimizer`` (``mixed_float16``) is saved as its inner
optimizer plus an optional ``loss_scale`` group, so a run can change its
precision policy and keep its optimizer state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from colab_resume import backend
from colab_resume.backend.host_pieces import HostPieces
from colab_resume.checkpoint.errors import (
    DamagedCheckpointError,
    DamagedObjectError,
    FrozenArraysChangedError,
    StructureMismatchError,
)
from colab_resume.checkpoint.formats.base import ObjectFile
from colab_resume.checkpoint.formats.portable.dtypes import (
    integer_misfit,
    loose,
    numpy_dtype,
)
from colab_resume.checkpoint.formats.portable.frozen import (
    EVERY,
    REBUILD,
    fingerprint,
    frozen_tensors,
    write_objects,
)
from colab_resume.checkpoint.formats.portable.pieces import (
    flatten,
    join,
    tensor_bound,
)
from colab_resume.checkpoint.formats.portable.shards import (
    read_arrays,
    read_shards,
    tensor_name,
    write_shards,
)
from colab_resume.checkpoint.groups import (
    StateLike,
    build_pending_optimizers,
    describe,
    expand,
    metrics_pending,
    variable_list,
)
from colab_resume.checkpoint.presets import decisive, loaded, said, whence
from colab_resume.checkpoint.structure import check_fits, same_objects
from colab_resume.protocol.manifest import FileEntry
from colab_resume.protocol.objects import OBJECT_DIR, SharedObjects, array_digest

# The loss-scale variables of a LossScaleOptimizer (mixed_float16 only).
LOSS_SCALE = "loss_scale"


class NotPortableError(TypeError):
    """A state group is not made of variables (an opaque TensorFlow trackable)."""


def _loss_scale_split(obj: Any) -> tuple[Any, list[Any]] | None:
    """``(inner optimizer, its own variables)`` for a LossScaleOptimizer."""
    import keras

    wrapper = getattr(keras.optimizers, "LossScaleOptimizer", None)
    if wrapper is None or not isinstance(obj, wrapper):
        return None
    own = [
        v
        for v in obj.variables
        if all(v is not w for w in obj.inner_optimizer.variables)
    ]
    return obj.inner_optimizer, own


def portable_groups(state: StateLike) -> dict[str, list[Any]]:
    """Group name -> variables, with loss-scale wrappers split off.

    Raises:
        NotPortableError: a group is an opaque trackable, not variables.
    """
    groups: dict[str, list[Any]] = {}
    for group, obj in expand(state).items():
        split = _loss_scale_split(obj)
        if split is not None:
            obj, own = split
            suffix = group.removeprefix("optimizer")
            groups[LOSS_SCALE + suffix] = own
        variables = variable_list(obj)
        if variables is None:
            variables = _generator_state(obj)
        if variables is None:
            raise NotPortableError(
                f"state group {group!r} is a {type(obj).__name__}, not variables: "
                f"a portable checkpoint holds Keras variables only (a model, an "
                f"optimizer, a metric, a variable, a tf.random.Generator or a "
                f"list of them)."
            )
        groups[group] = variables
    return groups


def _generator_state(obj: Any) -> list[Any] | None:
    """A ``tf.random.Generator``'s state variable (TensorFlow only)."""
    import sys

    tf = sys.modules.get("tensorflow")
    generator = getattr(getattr(tf, "random", None), "Generator", None)
    if generator is not None and isinstance(obj, generator):
        return [obj.state]
    return None


def _snapshot(variable: Any, *, whole: bool = False) -> Any:
    """The variable's value now, safe to read later from another thread.

    JAX: a host copy, taken here. Keras' JAX trainer donates the state's
    buffers to the next step, so a reference to the device array would be
    deleted (or reused) under the upload thread.

    TensorFlow: the tensor ``read_value()`` returns. On the CPU it shares
    the variable's buffer, and TensorFlow copies a variable's buffer before
    updating it in place while another tensor holds it, so the snapshot
    keeps this step's values at no cost here (as TensorFlow's own async
    checkpointing does); :func:`_to_host` turns it into NumPy later. On a
    GPU or TPU the copy to host memory is taken here, so no second copy
    of the weights is held in accelerator memory.

    A variable sharded over devices (JAX) comes as its
    :class:`~colab_resume.backend.host_pieces.HostPieces`: each distinct
    shard copied once, never gathered whole (unless ``whole``).
    """
    import numpy as np

    value = backend.current().read_value(variable, whole=whole)
    if isinstance(value, np.ndarray | HostPieces):
        return value
    return _kept_on_cpu(value)


def _host_whole(variable: Any) -> Any:
    """``variable``'s whole value as a NumPy array (to hash it)."""
    import numpy as np

    return np.asarray(_to_host(_snapshot(variable, whole=True)))


def _frozen_whole(name: str, value: Any) -> Any:
    """A frozen array's snapshot whole: pieces put together (frozen arrays
    are hashed and stored whole).

    Raises:
        ValueError: this process does not hold all of it (a multi-process
            run sharding a frozen array across processes).
    """
    if not isinstance(value, HostPieces):
        return value
    try:
        return value.whole()
    except ValueError as exc:
        raise ValueError(
            f"frozen array {name}: {exc}. Frozen arrays stored once or rebuilt "
            f"are written whole by process 0, which cannot hold this one; "
            f"create the Agent with frozen='every' to save it by the piece "
            f"with the rest."
        ) from None


def _kept_on_cpu(tensor: Any) -> Any:
    """A CPU tensor as it is (see :func:`_snapshot`); else its host copy."""
    import numpy as np

    if "CPU" in (getattr(tensor, "device", "") or "").upper():
        return tensor
    return np.asarray(tensor.numpy())


def _to_host(value: Any) -> Any:
    """A :func:`_snapshot` as a NumPy array, with no copy.

    ``np.asarray`` of a CPU tensor is a read-only view of its buffer (which
    the tensor keeps alive); its ``numpy()`` would copy the whole state.
    """
    import numpy as np

    return value if isinstance(value, HostPieces) else np.asarray(value)


class ArrayState:
    """The variables of one training setup, written as host arrays.

    The portable format's :class:`~colab_resume.checkpoint.formats.StateWriter`
    and :class:`~colab_resume.checkpoint.formats.StateReader`, on either
    backend.

    Args:
        state: a ``keras.Model`` (with its optimizer and metrics), a model
            with extras, or a mapping of name -> model, optimizer, variable.
        shard_bytes: about how many bytes of tensors one file holds.
        write_behind: leave serialising and writing the files to
            :meth:`sync` (the upload thread); else :meth:`write` does it.
        frozen: ``"once"``: the arrays no training step changes
            (:mod:`.frozen`) go to shared objects, written by the first
            save and then only referenced; ``"rebuild"``: they are stored
            nowhere, each checkpoint records their SHA-256, and a restore
            checks that ``build_model()`` made them again; ``"every"``:
            into every checkpoint's own files.

    Attributes:
        shared: the shared objects holding this state's frozen arrays that
            the run directory is known to hold (a commit or a restore said
            so); None until then, and with ``frozen="every"``.
        presets: the keras-hub presets the state's models were loaded from
            (:mod:`colab_resume.checkpoint.presets`), recorded with the
            frozen arrays; empty where none is known.

    Raises:
        NotPortableError: a group is not made of variables.
    """

    def __init__(
        self,
        state: StateLike,
        *,
        shard_bytes: int = 32 << 20,
        write_behind: bool = False,
        frozen: str = EVERY,
    ) -> None:
        self.source = state
        self.shard_bytes = shard_bytes
        self.write_behind = write_behind
        self.frozen = frozen
        self.shared: SharedObjects | None = None
        # What the last write references, and the objects it wrote.
        self._pending_shared: SharedObjects | None = None
        self._pending_objects: list[ObjectFile] = []
        # Objects found damaged at restore: uploaded again, whatever is there.
        self._rewrite: set[str] = set()
        self._pending: tuple[str, dict[str, Any], dict[str, Any]] | None = None
        # File name -> (size, CRC32C) of the shards the last sync wrote.
        self.written: dict[str, tuple[int, str]] = {}
        self._setup()

    def _setup(self) -> None:
        # TensorFlow: one traced read of the variables a save copies (None:
        # not traced yet; False: it cannot be), and which ones it reads.
        self._reader: Any = None
        self._reader_over: tuple[int, ...] = ()
        self._groups = portable_groups(self.source)
        self.structure: dict[str, Any] = {
            group: [describe(v) for v in variables]
            for group, variables in self._groups.items()
        }
        self._frozen = (
            [] if self.frozen == EVERY else frozen_tensors(self.source, self._groups)
        )
        self.presets = loaded(self.source)

    def outdated(self) -> bool:
        """True once the state's variables are not the ones this object lists
        (see :func:`~colab_resume.checkpoint.structure.same_objects`)."""
        try:
            groups = portable_groups(self.source)
        except NotPortableError:
            return True
        return not same_objects(self._groups, groups)

    @property
    def nbytes(self) -> int:
        total = 0
        for variables in self._groups.values():
            for v in variables:
                size = 1
                for d in v.shape:
                    size *= int(d)
                total += size * numpy_dtype(str(v.dtype)).itemsize
        return total

    def _snapshots(self, variables: list[Any]) -> list[Any]:
        """:func:`_snapshot` of ``variables``, in their order.

        On TensorFlow one ``tf.function`` reads them all: a read per
        variable costs tens of microseconds of eager dispatch each, which
        for a model of a few hundred variables is most of a save's
        blocking time. Tracing that function takes a few tenths of a
        second, so it is traced by :meth:`committed`, on the upload thread,
        once the first checkpoint is committed (a session killed in its
        first seconds then has one); the first save reads eagerly.
        """
        reader = self._reader
        if reader and self._reader_over == tuple(id(v) for v in variables):
            try:
                return [_kept_on_cpu(t) for t in reader()]
            except Exception:  # a variable kind tf.function cannot read
                self._reader = False
        return [_snapshot(v) for v in variables]

    def _named(self) -> dict[str, Any]:
        """Tensor name -> variable, in group order."""
        return {
            tensor_name(group, i): v
            for group, variables in self._groups.items()
            for i, v in enumerate(variables)
        }

    def _stored(self) -> bool:
        """Whether the run directory holds exactly this state's frozen arrays."""
        return bool(self._frozen) and (
            self.shared is not None and set(self.shared.digests()) == set(self._frozen)
        )

    def _to_copy(self) -> dict[str, Any]:
        """The variables a save copies: all but those stored as objects."""
        named = self._named()
        if self._stored():
            for name in self._frozen:
                del named[name]
        return named

    def _trace_reader(self) -> None:
        """Trace the one-call read of what a save copies (TensorFlow), once
        for each set of variables."""
        variables = list(self._to_copy().values())
        over = tuple(id(v) for v in variables)
        if self._reader is False or (self._reader and self._reader_over == over):
            return
        reader = backend.current().fused_reader(variables)
        if reader is None:  # JAX: the snapshot is a host copy anyway
            self._reader = False
            return
        self._reader_over = over
        try:
            # Called once here, not only traced: TensorFlow optimises and
            # instantiates a function's graph at its first call, which
            # would otherwise block the next save for tens of milliseconds.
            reader()
        except Exception:  # a variable kind tf.function cannot read
            self._reader = False
        else:
            self._reader = reader

    def write(self, prefix: str) -> None:
        """Snapshot every variable a save copies (see :func:`_snapshot`):
        all of them, or, once the frozen ones are stored as shared objects,
        the others only; write the files, or leave that to :meth:`sync`
        with ``write_behind``."""
        named = self._to_copy()
        arrays = dict(zip(named, self._snapshots(list(named.values())), strict=True))
        frozen: dict[str, Any] = {}
        if self._stored():
            self._pending_shared = self.shared
        else:
            self._pending_shared = None
            frozen = {
                name: _frozen_whole(name, arrays.pop(name)) for name in self._frozen
            }
        self._pending_objects = []
        self._pending = (prefix, arrays, frozen)
        if not self.write_behind:
            self.sync()

    def write_part(self, prefix: str) -> None:
        """See :meth:`~colab_resume.checkpoint.formats.StateWriter.write_part`.

        The frozen arrays are left out unless ``frozen="every"``: stored
        once, they are process 0's to write, and it refuses what it does
        not hold whole.
        """
        named = self._named()
        if self.frozen != EVERY:
            for name in self._frozen:
                del named[name]
        current = backend.current()
        arrays: dict[str, Any] = {}
        for name, variable in named.items():
            pieces = current.own_pieces(variable)
            if pieces is not None and pieces.pieces:
                arrays[name] = pieces
        self._pending_shared = None
        self._pending_objects = []
        self.written = {}
        # No pieces of its own (a replicated state): no file at all.
        self._pending = (prefix, arrays, {}) if arrays else None
        if not self.write_behind:
            self.sync()

    def sync(self) -> None:
        """Write the copied arrays' shards to local disk, if not done yet.

        Shard by shard: each shard's snapshots are released once it is
        written, so where training has since updated the variables (and
        TensorFlow copied them), the old values are freed as the save goes
        on rather than at its end. :attr:`written` then lists each file's
        size and CRC32C as written.
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            prefix, snapshots, frozen = pending
            del pending
            host = {name: _to_host(snapshots.pop(name)) for name in list(snapshots)}
            arrays = dict(flatten(host))  # a sharded variable: one tensor a piece
            del host
            self.written = write_shards(prefix, arrays, self.shard_bytes)
            if frozen:
                host = {name: _to_host(frozen.pop(name)) for name in list(frozen)}
                if self.frozen == REBUILD:
                    self._pending_shared = fingerprint(host, self.presets)
                    return
                directory = os.path.join(os.path.dirname(prefix), OBJECT_DIR)
                self._pending_shared, self._pending_objects = write_objects(
                    directory,
                    host,
                    self.shard_bytes,
                    rewrite=self._rewrite,
                    presets=self.presets,
                )

    def committed(self) -> None:
        """Take the objects the commit referenced as stored; trace the
        one-call read of what the next saves copy."""
        if self._pending_shared is not None:
            self.shared = self._pending_shared
            self._rewrite = set()
        self._pending_objects = []
        self._trace_reader()

    def objects(self) -> tuple[SharedObjects | None, list[ObjectFile]]:
        """See :meth:`~colab_resume.checkpoint.formats.StateWriter.objects`."""
        return self._pending_shared, list(self._pending_objects)

    def forget_objects(self) -> None:
        """The next save writes the frozen arrays again."""
        self.shared = None

    def restore(
        self,
        prefix: str,
        saved: dict[str, Any],
        files: Sequence[FileEntry] | None = None,
        arrived: Callable[[str], dict[str, Any] | None] | None = None,
        objects: SharedObjects | None = None,
    ) -> list[str]:
        """Read the shards next to ``prefix`` into the live variables, by position.

        Nothing is assigned before every tensor read is checked: a damaged
        checkpoint leaves the variables as they were.

        Args:
            prefix: the local checkpoint prefix.
            saved: the structure its manifest records.
            files: the manifest's file entries: each shard is checked
                against its size and CRC32C as it is read.
            arrived: blocks until a file of ``files`` is downloaded and
                verified: each shard is read as soon as it is, while the
                next ones download.
            objects: the shared objects holding the arrays ``files`` do
                not; their files lie next to ``prefix``. One that is
                missing or damaged is stood in for by the live arrays
                (what ``build_model()`` made) where each matches the
                SHA-256 the manifest records; the next save uploads it
                again.

        Returns:
            Optional groups skipped because they did not match.

        Raises:
            StructureMismatchError: the manifest does not fit the live state
                (the model changed), or a saved integer does not fit the
                narrower integer variable it goes into.
            DamagedCheckpointError: the files do not hold what the manifest
                lists (a tensor missing, of another shape or dtype...).
            DamagedObjectError: a shared object is damaged and the live
                arrays differ from what it held.
        """
        if build_pending_optimizers(self.source, self.structure, saved):
            self._setup()
        skipped = check_fits(
            loose(self.structure),
            loose(saved),
            metrics_pending=metrics_pending(self.source),
        )
        listed = tensor_bound(saved)
        if objects is not None and objects.rebuilt:
            self._check_rebuilt(objects)
        arrays, stood_in = self._read_objects(prefix, objects, listed, arrived)
        arrays.update(read_shards(prefix, files=files, tensors=listed, arrived=arrived))
        join(arrays, _shapes(saved))
        if arrived is not None:
            for entry in files or ():  # the other files verify too, first
                arrived(entry.name)
        # Arrays the live state already holds: rebuilt ones (checked above)
        # and those of a damaged object the live arrays stood in for.
        live: set[str] = set()
        if objects is not None:
            live.update(objects.rebuilt)
            live.update(t for name in stood_in for t in objects.holds(name))
        assignments = []
        for group, variables in self._groups.items():
            if group in skipped:
                continue
            for i, variable in enumerate(variables):
                name = tensor_name(group, i)
                if name in live:
                    continue  # it holds what the damaged object held
                # check_fits passed: the manifest's entry is the variable's
                # shape and dtype (integer widths aside).
                value = _as_listed(name, arrays.get(name), saved[group][i])
                target = numpy_dtype(str(variable.dtype))
                misfit = _misfit(value, target) if value.dtype != target else None
                if misfit:
                    raise StructureMismatchError(
                        f"tensor {name} is {value.dtype}{list(value.shape)}, the "
                        f"variable {getattr(variable, 'path', variable.name)} is "
                        f"{variable.dtype}{list(variable.shape)}: {misfit}. Continue "
                        f"the run on the backend that wrote it, whose dtype holds "
                        f"these values, or start a new run_dir."
                    )
                assignments.append((variable, value, target))
        for variable, value, target in assignments:
            if isinstance(value, HostPieces):  # each device's region only
                backend.current().assign_pieces(variable, value, target)
            else:
                variable.assign(value.astype(target, copy=False))
        self._adopt(objects, stood_in)
        return skipped

    def _read_objects(
        self,
        prefix: str,
        objects: SharedObjects | None,
        listed: int,
        arrived: Callable[[str], dict[str, Any] | None] | None,
    ) -> tuple[dict[str, Any], list[str]]:
        """The arrays of the shared objects, and the objects stood in for."""
        arrays: dict[str, Any] = {}
        stood_in: list[str] = []
        for entry in objects.files if objects is not None else ():
            assert objects is not None
            holds = objects.holds(entry.name)
            try:
                early = arrived(entry.name) if arrived is not None else None
                got = early
                if got is None:
                    path = os.path.join(os.path.dirname(prefix), entry.name)
                    got = read_arrays(path, tensors=listed, entry=entry)
                missing = sorted(set(holds) - set(got))
                if missing:
                    raise DamagedObjectError(
                        entry.name, f"it lacks tensors {missing[:5]} the manifest lists"
                    )
            except DamagedCheckpointError as exc:
                self._stand_in(entry.name, holds, exc)
                stood_in.append(entry.name)
                continue
            arrays.update((name, got[name]) for name in holds)
        return arrays, stood_in

    def _stand_in(
        self, name: str, holds: dict[str, str], damage: DamagedCheckpointError
    ) -> None:
        """Check that the live arrays are what damaged object ``name`` held.

        Raises:
            DamagedObjectError: they differ (or the model lacks them).
        """
        live = self._named()
        differ = [
            tensor
            for tensor, digest in sorted(holds.items())
            if tensor not in live or array_digest(_host_whole(live[tensor])) != digest
        ]
        if differ:
            raise DamagedObjectError(
                name,
                f"{damage}; the arrays build_model() made differ from the ones it "
                f"held ({len(differ)} of {len(holds)}: "
                f"{', '.join(differ[:5])}), so they cannot stand in for it",
            ) from None
        self._rewrite.add(name)

    def _check_rebuilt(self, objects: SharedObjects) -> None:
        """Check the live frozen arrays against a checkpoint's fingerprint.

        Where the checkpoint and this build name hubs' presets that differ
        (:func:`~colab_resume.checkpoint.presets.decisive`), the resume is
        refused on the handles alone, before any array is hashed (a base
        of gigabytes takes a while). Otherwise the arrays decide, and a
        refusal names the presets too, where known.

        Raises:
            FrozenArraysChangedError: some differ, naming them and the fix.
        """
        trained_on, built = objects.presets, self.presets
        if decisive(trained_on, built):
            raise _changed(
                f"on preset {said(trained_on)}, build_model() loaded {said(built)}",
                [],
                trained_on,
                built,
            )
        rebuilt = objects.rebuilt
        live = self._named()
        differ = [
            tensor
            for tensor, digest in sorted(rebuilt.items())
            if tensor not in live or array_digest(_host_whole(live[tensor])) != digest
        ]
        if differ:
            described = ", ".join(
                f"{name} ({live[name].path})" if name in live else name
                for name in differ[:8]
            )
            raise _changed(
                f"on frozen arrays build_model() no longer makes"
                f"{whence(trained_on, built)}: {len(differ)} of {len(rebuilt)} "
                f"differ ({described})",
                differ,
                trained_on,
                built,
            )

    def _adopt(self, objects: SharedObjects | None, stood_in: list[str]) -> None:
        """After a restore: what the run directory holds of the frozen arrays
        (or, with ``"rebuild"``, their fingerprint, checked just now)."""
        self.shared = None
        if objects is None or stood_in or not self._frozen:
            return
        if set(objects.digests()) != set(self._frozen):
            return
        if self.frozen == REBUILD:
            self.shared = SharedObjects(
                files=(),
                arrays={},
                rebuilt=objects.digests(),
                presets=self.presets or objects.presets,
            )
        elif not objects.rebuilt:
            self.shared = objects


def _changed(
    what: str, differ: list[str], trained_on: tuple[str, ...], built: tuple[str, ...]
) -> FrozenArraysChangedError:
    """The refusal of a ``frozen="rebuild"`` resume: trained ``what``."""
    fix = (
        f"load {said(trained_on)} again"
        if trained_on
        else "load the same base (the same preset version and seed)"
    )
    return FrozenArraysChangedError(
        f"the checkpoint was trained with frozen='rebuild' {what}. It stores no "
        f"copy of the frozen arrays, so training cannot continue exactly. Make "
        f"build_model() {fix}, or start a new run_dir; frozen='once' stores the "
        f"base with the run.",
        differ,
        trained_on=trained_on,
        loaded=built,
    )


def _as_listed(name: str, value: Any, listed: list[Any]) -> Any:
    """``value`` if it is the tensor the manifest lists as ``listed``.

    Raises:
        DamagedCheckpointError: it is missing, or of another shape or dtype.
    """
    _, shape, dtype = listed
    if value is None:
        raise DamagedCheckpointError(
            f"the shards have no tensor {name}, which the manifest lists"
        )
    if tuple(value.shape) != tuple(shape) or value.dtype != numpy_dtype(dtype):
        raise DamagedCheckpointError(
            f"tensor {name} in the shards is {value.dtype}{list(value.shape)}, "
            f"the manifest lists {numpy_dtype(dtype)}{list(shape)}"
        )
    return value


def _shapes(saved: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor name -> the whole shape the manifest's structure lists."""
    return {
        tensor_name(group, i): tuple(listed[1])
        for group, variables in saved.items()
        if isinstance(variables, list)
        for i, listed in enumerate(variables)
    }


def _misfit(value: Any, target: Any) -> str | None:
    """:func:`integer_misfit` of a whole array or of each of its pieces."""
    if isinstance(value, HostPieces):
        for _, array in value.pieces:
            misfit = integer_misfit(array, target)
            if misfit:
                return misfit
        return None
    return integer_misfit(value, target)
