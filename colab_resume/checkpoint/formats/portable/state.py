"""Checkpoints as host arrays in safetensors files: the portable format.

Both backends write it and both read it, so a run continues on TensorFlow
from a checkpoint JAX wrote, and the other way round. Every variable of the
groups :func:`~colab_resume.checkpoint.groups.expand` names (model,
optimizer, metrics, seed generators, extras) is copied to a host NumPy array
and written as tensor ``<group>/<position>`` (``model/000003``). The
tensors are split into shards of about ``shard_bytes``: ``ckpt.safetensors``
when one shard holds them all, else ``ckpt.00000-of-00003.safetensors``...
The manifest's structure (name, shape, dtype per position) is the same on
both backends, and the shards are uploaded, CRC32C-listed and committed by
the same manager as any checkpoint file.

Why safetensors: a well-kept, documented tensor format (a JSON header, then
raw little-endian bytes; no pickle, so loading a checkpoint runs no code),
readable by NumPy, JAX, PyTorch and TensorFlow alike, with a dtype of its
own for bfloat16 (``BF16``), which ``.npy`` files can only store as opaque
void bytes. It is a small wheel, already on Colab. We write it with
:mod:`~colab_resume.checkpoint.shard_write` (each array's own buffer, no
copy) and read it with :mod:`~colab_resume.checkpoint.shard_file`, mapping
dtypes ourselves: ``safetensors.numpy`` does not know bfloat16
(``ml_dtypes``, which both JAX and TensorFlow bring, does).

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

import glob
import os
from collections.abc import Callable, Sequence
from typing import Any

from colab_resume import backend
from colab_resume.checkpoint.errors import (
    DamagedCheckpointError,
    StructureMismatchError,
)
from colab_resume.checkpoint.groups import (
    StateLike,
    build_pending_optimizers,
    describe,
    expand,
    metrics_pending,
    variable_list,
)
from colab_resume.checkpoint.shard_file import header_limit, read_views
from colab_resume.checkpoint.shard_write import write_shard
from colab_resume.checkpoint.structure import check_fits, same_objects
from colab_resume.protocol.manifest import FileEntry

SUFFIX = ".safetensors"
# The loss-scale variables of a LossScaleOptimizer (mixed_float16 only).
LOSS_SCALE = "loss_scale"

# safetensors dtype codes -> NumPy dtype names ("bfloat16" via ml_dtypes).
_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "U64": "uint64",
    "I32": "int32",
    "U32": "uint32",
    "I16": "int16",
    "U16": "uint16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}


# How many tensors a shard read without its manifest may hold (tools and
# tests): bounds its header at about 16 MiB.
UNLISTED_TENSORS = 1 << 14


class NotPortableError(TypeError):
    """A state group is not made of variables (an opaque TensorFlow trackable)."""


def _numpy_dtype(name: str) -> Any:
    import numpy as np

    name = name.removeprefix("<dtype: '").rstrip("'>")  # a tf.DType's str()
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def tensor_name(group: str, index: int) -> str:
    return f"{group}/{index:06d}"


def shard_names(base: str, count: int) -> list[str]:
    """The file names (without directory) of ``count`` shards of ``base``."""
    if count == 1:
        return [base + SUFFIX]
    return [f"{base}.{i:05d}-of-{count:05d}{SUFFIX}" for i in range(count)]


def is_array_checkpoint(file_names: Any) -> bool:
    """True when a checkpoint's files are safetensors shards (this format)."""
    return any(str(name).endswith(SUFFIX) for name in file_names)


def write_arrays(path: str, arrays: dict[str, Any]) -> tuple[int, str]:
    """Write name -> host array to ``path`` as safetensors; its size and CRC32C."""
    return write_shard(path, arrays)


def plan_shards(nbytes: Sequence[int], shard_bytes: int) -> list[range]:
    """Consecutive runs of tensors (by position) of about ``shard_bytes`` each."""
    runs: list[range] = []
    start = size = 0
    for i, n in enumerate(nbytes):
        if i > start and size + n > shard_bytes:
            runs.append(range(start, i))
            start, size = i, 0
        size += n
    runs.append(range(start, len(nbytes)))
    return runs


def write_shards(
    prefix: str, arrays: dict[str, Any], shard_bytes: int
) -> dict[str, tuple[int, str]]:
    """Write ``arrays`` next to ``prefix`` in shards of about ``shard_bytes``.

    Each shard's arrays are dropped from ``arrays`` once it is written, so
    a caller that holds them nowhere else frees them shard by shard.

    Returns:
        file name -> (size, CRC32C) of each shard, as written.
    """
    names = list(arrays)
    runs = plan_shards([int(arrays[n].nbytes) for n in names], shard_bytes)
    directory, base = os.path.split(prefix)
    written: dict[str, tuple[int, str]] = {}
    for file_name, run in zip(shard_names(base, len(runs)), runs, strict=True):
        shard = {names[i]: arrays.pop(names[i]) for i in run}
        written[file_name] = write_shard(os.path.join(directory, file_name), shard)
        del shard  # this shard's snapshot buffers can go now
    return written


def read_arrays(
    path: str, *, tensors: int = UNLISTED_TENSORS, entry: FileEntry | None = None
) -> dict[str, Any]:
    """The arrays of a safetensors file, by name, as read-only NumPy views
    of one verified copy (:mod:`~colab_resume.checkpoint.shard_file`).

    Args:
        path: the file.
        tensors: how many tensors its checkpoint lists (bounds its header).
        entry: its manifest entry; its size and CRC32C are checked over the
            bytes the views show.

    Raises:
        DamagedShardError: the file is damaged, or not the one ``entry`` lists.
    """
    return read_views(
        path,
        _dtype_of_code,
        max_header_bytes=header_limit(tensors),
        size=None if entry is None else entry.size,
        crc32c=None if entry is None else entry.crc32c,
    )


def _dtype_of_code(code: str) -> Any:
    return _numpy_dtype(_DTYPES[code])


def read_shards(
    prefix: str,
    *,
    files: Sequence[FileEntry] | None = None,
    tensors: int = UNLISTED_TENSORS,
    arrived: Callable[[str], dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """Every tensor of the shards next to ``prefix``, by name.

    Args:
        prefix: the checkpoint prefix (its directory holds the shards).
        files: the manifest's entries: exactly its shards are read, each
            checked against its entry. None: whatever shards lie there.
        tensors: how many tensors the checkpoint lists (bounds each header).
        arrived: called with a shard's name before it is read; blocks until
            it is downloaded and verified (the next ones download meanwhile),
            and returns its tensors where it was read already (as this
            reads it), else None.
    """
    directory, base = os.path.split(prefix)
    if files is None:
        pattern = os.path.join(glob.escape(directory), glob.escape(base) + "*" + SUFFIX)
        found: list[tuple[str, FileEntry | None]] = [
            (path, None) for path in sorted(glob.glob(pattern))
        ]
    else:
        found = [
            (os.path.join(directory, f.name), f)
            for f in files
            if f.name.endswith(SUFFIX)
        ]
    arrays: dict[str, Any] = {}
    for path, entry in found:
        early = arrived(os.path.basename(path)) if arrived is not None else None
        arrays.update(
            early
            if early is not None
            else read_arrays(path, tensors=tensors, entry=entry)
        )
    return arrays


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


# Integer dtypes the backends choose differently: JAX without x64 keeps an
# optimizer's iteration count in int32, TensorFlow in int64; a Dropout's
# SeedGenerator state is uint32 on JAX, int64 on TensorFlow. An integer
# variable therefore takes an integer tensor of any width and sign, as long
# as every value fits (checked on restore, see _integer_misfit).
_INTEGER = "integer"


def _loose(structure: dict[str, Any]) -> dict[str, Any]:
    """``structure`` with every integer dtype alike (compared as such)."""
    return {
        group: [[n, s, _INTEGER if _is_integer(d) else d] for n, s, d in variables]
        if isinstance(variables, list)
        else variables
        for group, variables in structure.items()
    }


def _is_integer(dtype_name: str) -> bool:
    try:
        return bool(_numpy_dtype(dtype_name).kind in "iu")
    except TypeError:  # a dtype NumPy does not know is no integer of ours
        return False


def _integer_misfit(value: Any, target: Any) -> str | None:
    """Why integer ``value`` cannot become ``target`` exactly, or None.

    Returns:
        None when both are integers and every value lies in ``target``'s
        range, else the values and the range, for the error message.
    """
    import numpy as np

    if value.dtype.kind not in "iu" or target.kind not in "iu":
        return f"{value.dtype} cannot become {target}"
    if value.size == 0:
        return None
    info = np.iinfo(target)
    # Python ints: NumPy compares uint64 with a negative bound wrongly.
    low, high = int(value.min()), int(value.max())
    if low >= int(info.min) and high <= int(info.max):
        return None
    return (
        f"it holds values from {low} to {high}, outside {target}'s range "
        f"[{int(info.min)}, {int(info.max)}]"
    )


def _snapshot(variable: Any) -> Any:
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
    """
    import numpy as np

    value = backend.current().read_value(variable)
    return value if isinstance(value, np.ndarray) else _kept_on_cpu(value)


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

    return np.asarray(value)


class ArrayState:
    """The variables of one training setup, written as host arrays.

    The same interface as :class:`~colab_resume.checkpoint.state.TrainingState`
    (``structure``, ``outdated``, ``write``, ``sync``, ``restore``,
    ``nbytes``), on either backend.

    Args:
        state: a ``keras.Model`` (with its optimizer and metrics), a model
            with extras, or a mapping of name -> model, optimizer, variable.
        shard_bytes: about how many bytes of tensors one file holds.
        write_behind: leave serialising and writing the files to
            :meth:`sync` (the upload thread); else :meth:`write` does it.

    Raises:
        NotPortableError: a group is not made of variables.
    """

    def __init__(
        self,
        state: StateLike,
        *,
        shard_bytes: int = 32 << 20,
        write_behind: bool = False,
    ) -> None:
        self.source = state
        self.shard_bytes = shard_bytes
        self.write_behind = write_behind
        self._pending: tuple[str, dict[str, Any]] | None = None
        # File name -> (size, CRC32C) of the shards the last sync wrote.
        self.written: dict[str, tuple[int, str]] = {}
        self._setup()

    def _setup(self) -> None:
        # TensorFlow: one traced read of them all (None: not traced yet;
        # False: it cannot be).
        self._reader: Any = None
        self._groups = portable_groups(self.source)
        self.structure: dict[str, Any] = {
            group: [describe(v) for v in variables]
            for group, variables in self._groups.items()
        }

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
                total += size * _numpy_dtype(str(v.dtype)).itemsize
        return total

    def _snapshots(self) -> list[Any]:
        """:func:`_snapshot` of every variable, in group order.

        On TensorFlow one ``tf.function`` reads them all: a read per
        variable costs tens of microseconds of eager dispatch each, which
        for a model of a few hundred variables is most of a save's
        blocking time. Tracing that function takes a few tenths of a
        second, so it is traced by :meth:`sync`, on the upload thread,
        after the first save; the first save reads eagerly.
        """
        reader = self._reader
        if reader:
            try:
                return [_kept_on_cpu(t) for t in reader()]
            except Exception:  # a variable kind tf.function cannot read
                self._reader = False
        return [_snapshot(v) for v in self._variables()]

    def _variables(self) -> list[Any]:
        """Every variable, in group order (the order of the tensors' names)."""
        return [v for group in self._groups.values() for v in group]

    def _trace_reader(self) -> None:
        """Trace the one-call read of every variable (TensorFlow), once."""
        if self._reader is not None:
            return
        reader = backend.current().fused_reader(self._variables())
        if reader is None:  # JAX: the snapshot is a host copy anyway
            self._reader = False
            return
        try:
            # Called once here, not only traced: TensorFlow optimises and
            # instantiates a function's graph at its first call, which
            # would otherwise block the next save for tens of milliseconds.
            reader()
        except Exception:  # a variable kind tf.function cannot read
            self._reader = False
        else:
            self._reader = reader

    def write(self, prefix: str, options: Any = None) -> None:
        """Snapshot every variable (see :func:`_snapshot`); write the shards,
        or leave that to :meth:`sync` with ``write_behind``."""
        names = [
            tensor_name(group, i)
            for group, variables in self._groups.items()
            for i in range(len(variables))
        ]
        arrays = dict(zip(names, self._snapshots(), strict=True))
        self._pending = (prefix, arrays)
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
            prefix, snapshots = pending
            del pending
            arrays = {name: _to_host(snapshots.pop(name)) for name in list(snapshots)}
            self.written = write_shards(prefix, arrays, self.shard_bytes)
        self._trace_reader()

    def restore(
        self,
        prefix: str,
        saved: dict[str, Any],
        options: Any = None,
        files: Sequence[FileEntry] | None = None,
        arrived: Callable[[str], dict[str, Any] | None] | None = None,
    ) -> list[str]:
        """Read the shards next to ``prefix`` into the live variables, by position.

        Nothing is assigned before every tensor read is checked: a damaged
        checkpoint leaves the variables as they were.

        Args:
            prefix: the local checkpoint prefix.
            saved: the structure its manifest records.
            options: unused (TensorFlow's format takes them).
            files: the manifest's file entries: each shard is checked
                against its size and CRC32C as it is read.
            arrived: blocks until a file of ``files`` is downloaded and
                verified: each shard is read as soon as it is, while the
                next ones download.

        Returns:
            Optional groups skipped because they did not match.

        Raises:
            StructureMismatchError: the manifest does not fit the live state
                (the model changed), or a saved integer does not fit the
                narrower integer variable it goes into.
            DamagedCheckpointError: the files do not hold what the manifest
                lists (a tensor missing, of another shape or dtype...).
        """
        if build_pending_optimizers(self.source, self.structure, saved):
            self._setup()
        skipped = check_fits(
            _loose(self.structure),
            _loose(saved),
            metrics_pending=metrics_pending(self.source),
        )
        listed = sum(len(v) for v in saved.values() if isinstance(v, list))
        arrays = read_shards(prefix, files=files, tensors=listed, arrived=arrived)
        if arrived is not None:
            for entry in files or ():  # the other files verify too, first
                arrived(entry.name)
        assignments = []
        for group, variables in self._groups.items():
            if group in skipped:
                continue
            for i, variable in enumerate(variables):
                name = tensor_name(group, i)
                # check_fits passed: the manifest's entry is the variable's
                # shape and dtype (integer widths aside).
                value = _as_listed(name, arrays.get(name), saved[group][i])
                target = _numpy_dtype(str(variable.dtype))
                misfit = (
                    _integer_misfit(value, target) if value.dtype != target else None
                )
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
            variable.assign(value.astype(target, copy=False))
        return skipped


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
    if tuple(value.shape) != tuple(shape) or value.dtype != _numpy_dtype(dtype):
        raise DamagedCheckpointError(
            f"tensor {name} in the shards is {value.dtype}{list(value.shape)}, "
            f"the manifest lists {_numpy_dtype(dtype)}{list(shape)}"
        )
    return value
