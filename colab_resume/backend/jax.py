"""Keras on JAX: a ``keras.distribution.DataParallel`` over the devices.

What ``strategy.scope()`` is to TensorFlow, a ``keras.distribution`` is to
JAX: :func:`connect` builds a fresh ``DataParallel`` over every device of
the chosen platform and makes it Keras' global distribution, so variables
are replicated and each global batch is split over the devices — unless the
user set a distribution of their own (a ``ModelParallel`` with a
``LayoutMap``), which is kept. The loop still enters
``distribution.scope()`` around ``build_model``.

On the CPU, ``cpu_replicas=N`` splits the host into N XLA devices with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``. XLA reads the flag
when JAX initialises its backends (the first ``jax.devices()``, not the
import), so it is set here before that; a process whose JAX already
initialised with fewer CPU devices gets an error saying how to fix it.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from colab_resume.backend import jax_distributed
from colab_resume.backend.base import CustomLoop, StepHooks
from colab_resume.backend.host_pieces import HostPieces
from colab_resume.backend.numpy_batches import epoch_batches, epoch_input
from colab_resume.data.contract import DatasetError
from colab_resume.runtime import diagnose
from colab_resume.runtime.detect import detect
from colab_resume.runtime.errors import AcceleratorNotFoundError, LogicalDevicesError

if (
    TYPE_CHECKING
):  # annotations only: the accelerator asks this module for its connector
    from colab_resume.backend.connector import Connecting, Connector
    from colab_resume.data.grain import GrainPosition
    from colab_resume.runtime.connection import Connection

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# The distributions the agent built; any other set in Keras is the user's.
_OURS: weakref.WeakSet[Any] = weakref.WeakSet()
log = logging.getLogger(__name__)
# A multi-process epoch's rows generator -> the global batches it splits.
_GLOBAL_BATCHES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class JaxConnection:
    """What :func:`connect` built.

    Attributes:
        distribution: the ``keras.distribution.DataParallel`` (has ``scope()``).
        kind: ``"tpu"``, ``"gpu"`` or ``"cpu"``.
        chip: the devices' kind, e.g. ``"TPU v5 lite"`` or ``"cpu"``.
        replicas: devices the batch is split over.
    """

    distribution: Any
    kind: str
    chip: str
    replicas: int


def backends_initialized() -> bool:
    """True once JAX has created its backends (XLA flags no longer apply)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
    except ImportError:  # a JAX without this module: assume the worst
        return True
    probe = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(probe()) if callable(probe) else True


def request_cpu_devices(count: int, env: dict[str, str] | None = None) -> None:
    """Ask XLA for ``count`` host devices, before JAX initialises.

    Raises:
        LogicalDevicesError: JAX already initialised with fewer CPU devices.
    """
    environ: Any = os.environ if env is None else env
    if count <= 1:
        return
    if backends_initialized():
        import jax

        have = len(jax.devices("cpu"))
        if have >= count:
            return
        raise LogicalDevicesError(
            f"cpu_replicas={count}, but JAX already initialised with {have} CPU "
            f"device(s) in this process, and XLA reads "
            f"{DEVICE_COUNT_FLAG} only at initialisation. Create the Agent (or "
            f"call agent.connect()) before any JAX computation, or set "
            f"XLA_FLAGS={DEVICE_COUNT_FLAG}={count} before starting Python."
        )
    flags = re.sub(rf"{DEVICE_COUNT_FLAG}=\S*", "", environ.get("XLA_FLAGS", ""))
    environ["XLA_FLAGS"] = f"{flags.strip()} {DEVICE_COUNT_FLAG}={count}".strip()


def connect(prefer: str, cpu_replicas: int) -> JaxConnection:
    """The user's ``keras.distribution`` if they set one, else a fresh
    ``DataParallel`` over the devices, set as Keras' distribution.

    Args:
        prefer: ``"auto"`` (JAX's default platform: TPU, then GPU, then
            CPU), ``"tpu"``, ``"gpu"`` or ``"cpu"``.
        cpu_replicas: CPU devices to split the host into (CPU only).

    Raises:
        AcceleratorNotFoundError: ``prefer`` names a platform JAX does not see.
        LogicalDevicesError: see :func:`request_cpu_devices`.
    """
    if prefer in ("auto", "cpu"):
        request_cpu_devices(cpu_replicas)
    import jax
    import keras

    platform = None if prefer == "auto" else prefer
    try:
        devices = jax.devices(platform)
    except RuntimeError as exc:
        raise AcceleratorNotFoundError(
            f"prefer={prefer!r} but JAX sees no {prefer.upper()} ({exc}). Choose a "
            f"{prefer.upper()} runtime, install the JAX build for it, or "
            f"prefer='auto'."
        ) from exc
    many = jax_distributed.process_count() > 1
    users = keras.distribution.distribution()
    if users is not None and users not in _OURS:
        # The user's (a ModelParallel with their LayoutMap, say): kept, never
        # replaced by a DataParallel that would replicate what they sharded.
        return _kept(users)
    if devices[0].platform == "cpu" and not many:
        if len(devices) < cpu_replicas:
            raise LogicalDevicesError(
                f"cpu_replicas={cpu_replicas} but JAX has {len(devices)} CPU "
                f"device(s): XLA_FLAGS sets {DEVICE_COUNT_FLAG} to a smaller "
                f"number. Unset it, or start a fresh process."
            )
        devices = devices[:cpu_replicas]
    # Across processes, every device of every host (jax.devices() is global),
    # and each process feeds its own rows: Keras' auto-sharding wants tf.data.
    distribution = keras.distribution.DataParallel(
        devices=devices, **({"auto_shard_dataset": False} if many else {})
    )
    keras.distribution.set_distribution(distribution)
    _OURS.add(distribution)
    log.info(
        "training under a DataParallel over %d %s device(s), built by the agent "
        "(no keras.distribution was set)",
        len(devices),
        devices[0].platform,
    )
    kind = str(devices[0].platform)
    chip = str(getattr(devices[0], "device_kind", kind)) if kind != "cpu" else "cpu"
    return JaxConnection(distribution, kind, chip, len(devices))


def _kept(distribution: Any) -> JaxConnection:
    """The user's distribution, as a connection (said in the log)."""
    import jax

    # Keras' mesh names its devices ("cpu:0"); JAX's own mesh holds them.
    backend_mesh = getattr(distribution.device_mesh, "backend_mesh", None)
    devices = list(backend_mesh.devices.flat) if backend_mesh else jax.devices()
    kind = str(devices[0].platform)
    chip = str(getattr(devices[0], "device_kind", kind)) if kind != "cpu" else "cpu"
    mesh = distribution.device_mesh
    if jax.process_count() > 1 and getattr(distribution, "auto_shard_dataset", False):
        # The agent hands each process its own rows (as with its own
        # DataParallel): Keras' auto-sharding would want a tf.data.Dataset.
        distribution.auto_shard_dataset = False
    log.info(
        "training under the %s the user set (mesh %s, axes %s), kept: the agent "
        "builds its own DataParallel only when none is set",
        type(distribution).__name__,
        tuple(mesh.shape),
        tuple(mesh.axis_names),
    )
    return JaxConnection(distribution, kind, chip, batch_split(distribution))


def batch_split(distribution: Any) -> int:
    """Devices a global batch is split over: the mesh's batch axis (every
    device for a ``DataParallel``; the batch axis of a ``ModelParallel``)."""
    mesh = distribution.device_mesh
    axis = getattr(distribution, "batch_dim_name", None)
    if axis in tuple(mesh.axis_names):
        return int(dict(zip(mesh.axis_names, mesh.shape, strict=True))[axis])
    return int(mesh.devices.size)


def describe_distribution(model: Any = None) -> dict[str, Any]:
    """Keras' global distribution as JSON, and ``model``'s sharded variables.

    ``layouts``: each variable not replicated whole on every device, by its
    path, as its partition spec (one axis name or None per dimension).
    """
    import keras

    distribution = keras.distribution.distribution()
    if distribution is None:
        return {}
    mesh = distribution.device_mesh
    found: dict[str, Any] = {
        "kind": type(distribution).__name__,
        "mesh": [int(n) for n in mesh.shape],
        "axes": [str(a) for a in mesh.axis_names],
        "set_by": "agent" if distribution in _OURS else "user",
    }
    layouts: dict[str, Any] = {}
    for variable in getattr(model, "variables", None) or []:
        spec = getattr(getattr(variable.value, "sharding", None), "spec", None)
        if spec is not None and any(axis is not None for axis in spec):
            layouts[str(variable.path)] = [
                list(axis) if isinstance(axis, tuple) else axis for axis in spec
            ]
    if layouts:
        found["layouts"] = layouts
    return found


def replicas() -> int:
    """Devices the global batch is split over by Keras' current distribution."""
    import keras

    distribution = keras.distribution.distribution()
    if distribution is None:
        return 1
    return batch_split(distribution)


def sync_fit_state(model: Any) -> None:
    """Put the values ``model.fit`` is training back into ``model``'s variables.

    Mid-epoch, Keras' JAX trainer keeps the trained values in its own state
    and leaves the variables stale (their buffers may have been donated to
    a step, and deleted): a save from inside ``fit`` must call this first.
    Nothing happens outside ``fit``.
    """
    model.jax_state_sync()


def forget_compiled() -> None:
    """Drop JAX's caches of traced and compiled programs (after a device loss).

    Programs compiled for a halted TPU must not be reused; Keras retraces
    its train step on the rebuilt model anyway.
    """
    import jax

    clear = getattr(jax, "clear_caches", None)
    if callable(clear):
        clear()


def lay_out(batch: Any, distribution: Any) -> Any:
    """``batch``'s arrays placed as ``distribution`` splits a global batch.

    Keras' ``fit`` does this for its own steps; a custom loop's
    ``train_step`` gets its batch already split over the devices. Across
    processes ``batch`` is this process's rows, and the result is the
    global ``jax.Array`` whose addressable shards hold them.
    """
    if distribution is None:
        return batch
    import jax
    import keras

    count = jax_distributed.process_count()

    def put(array: Any) -> Any:
        if count == 1:
            layout = distribution.get_data_layout(tuple(array.shape))
            return jax.device_put(array, layout.backend_layout)
        # ``array`` is this process's rows: the global batch is every
        # process's, assembled as Keras' own trainer does for ``fit``.
        shape = (int(array.shape[0]) * count, *array.shape[1:])
        layout = distribution.get_data_layout(shape)
        return jax.make_array_from_process_local_data(
            layout.backend_layout, array, shape
        )

    return keras.tree.map_structure(put, batch)


class JaxConnector:
    """Connects one accelerator (:class:`~colab_resume.backend.connector.Connecting`)
    with JAX."""

    def __init__(self, accelerator: Connecting):
        self._accelerator = accelerator

    def connect(self, *, fresh: bool = False) -> Any:
        """A ``DataParallel`` distribution over what ``prefer`` asks for.

        Args:
            fresh: after a loss: drop JAX's compiled programs for the old
                devices first.
        """
        a = self._accelerator
        if fresh:
            forget_compiled()
        p = a.platform
        info = detect(p.env, root=p.root, module_available=p.module_available)
        made = connect(a.options.prefer, a.options.cpu_replicas)
        if info.is_tpu and made.kind != "tpu" and a.options.prefer == "auto":
            # Hours on the CPU by mistake cost more than this error.
            raise diagnose.jax_tpu_unusable_error(
                info, made.kind, lock_path=p.lock_path, proc_root=p.proc_root
            )
        return a.finish(
            made.distribution, kind=made.kind, chip=made.chip, replicas=made.replicas
        )

    def release(self, previous: Connection) -> None:
        """Nothing to shut down: JAX's devices are the process'."""
        return None

    def reconnect(self, previous: Connection) -> Any:
        """A fresh distribution over the devices JAX sees now."""
        return self.connect(fresh=True)


class JaxBackend:
    """:class:`~colab_resume.backend.base.Backend` for Keras on JAX.

    Epochs are NumPy batches (no ``tf.data``), checkpoints host arrays only.
    """

    name = "jax"
    portable_only = True
    # One fit call per epoch: a chained Python iterator has no graph to
    # tell whether its epochs' boundaries stay invisible.
    chains_epochs = False
    reads_pipeline_graphs = False

    def require(self) -> None:
        # TensorFlow is not needed (Colab's TPU runtime has none).
        from colab_resume.backend.install import require_keras

        require_keras("jax keras")

    def connector(self, accelerator: Connecting) -> Connector:
        return JaxConnector(accelerator)

    def variable_types(self) -> tuple[type, ...]:
        return ()

    def generator_types(self) -> tuple[type, ...]:
        return ()

    def variable_scope(self, model: Any) -> contextlib.AbstractContextManager[Any]:
        # The global keras.distribution lays variables out by itself.
        return contextlib.nullcontext()

    def epoch_dataset(
        self,
        make_dataset: Callable[..., Any],
        epoch: int,
        *,
        skip: int,
        steps_per_epoch: int,
        position: GrainPosition | None = None,
    ) -> Any:
        fed = numpy_epoch(
            make_dataset,
            epoch,
            skip=skip,
            steps_per_epoch=steps_per_epoch,
            position=position,
            kind=True,
        )
        count = jax_distributed.process_count()
        if count == 1 or jax_distributed.shards_given():
            return fed  # one process, or its own rows already
        batches = fed if hasattr(fed, "__next__") else iter(fed)
        # make_dataset yields global batches on every process; each feeds
        # its own rows, which Keras assembles into the global batch.
        index = jax_distributed.process_index()
        rows = (jax_distributed.local_rows(b, index, count) for b in batches)
        _GLOBAL_BATCHES[rows] = batches
        return rows

    def first_batch_of(self, dataset: Any) -> Any:
        # A process's rows differ from process to process: the data
        # fingerprint is the global batch's, the same on every process.
        source = _GLOBAL_BATCHES.get(dataset, dataset)
        batch = next(iter(source), None)
        if jax_distributed.shards_given():
            # No process sees the global batch: every process's shapes are
            # checked equal, and the fingerprint covers all their rows.
            return jax_distributed.agree_first_batch(batch)
        return batch

    def check_first_batch(
        self, make_dataset: Callable[..., Any], dataset: Any, epoch: int, model: Any
    ) -> None:
        # Built again: looking into ``dataset`` would consume its first batch.

        check_fed_batch(first_batch(make_dataset, epoch), _fed_devices(), epoch)

    def chain(self, datasets: Sequence[Any]) -> Any:
        if len(datasets) != 1:
            raise ValueError(
                "JAX epochs are not chained (chains_epochs is False): pass one "
                "epoch's batches."
            )
        return datasets[0]

    def describe_distribution(self, strategy: Any, model: Any) -> dict[str, Any]:
        """Keras' global distribution: kind, mesh, axes, origin, layouts."""
        return describe_distribution(model)

    def fit_input(self, dataset: Any, model: Any) -> tuple[Any, Callable[[], None]]:
        """The dataset itself: nothing of JAX's blocks when ``fit`` lets go."""
        return dataset, lambda: None

    def random_op_watch(self) -> Any:
        """None: JAX has no stateful random ops hidden from the checkpoint."""
        return None

    def sync_fit_state(self, model: Any) -> None:
        sync_fit_state(model)

    def outside_scope(self, model: Any) -> bool:
        """False: JAX has no strategy scope (its distribution is global)."""
        return False

    def host_variable(self, shape: tuple[int, ...], dtype: str) -> Any:
        import keras
        import numpy as np

        # Laid out by the global distribution like every variable; fine.
        return keras.Variable(np.zeros(shape, dtype), trainable=False)

    def train_custom(
        self, loop: CustomLoop, start_step: int, duties: StepHooks, strategy: Any
    ) -> None:
        """``train_step`` gets each global batch, laid out over the devices.

        Across processes the epochs yield this process's rows (see
        :meth:`epoch_dataset`), which :func:`lay_out` assembles into the
        global batch: the step's code is the same on one process or many.
        """
        # This process's rows are split over its own devices.
        devices = replicas() // jax_distributed.process_count()
        for epoch, rows, steps in loop.epochs(start_step):
            batches = loop.follow(rows, epoch)
            for index in range(steps):
                batch = next(batches)
                if epoch == loop.start_epoch and index == 0:
                    check_fed_batch(batch, devices, epoch)
                duties.before_step()
                loop.last_outputs = loop.train_step(
                    loop.state, lay_out(batch, strategy)
                )
                if duties.after_step(duties.step + 1):
                    return

    def read_value(self, variable: Any, *, whole: bool = False) -> Any:
        # A host copy, taken now: Keras' JAX trainer donates the state's
        # buffers to the next step, which would delete a device array. A
        # sharded array comes as its pieces (see host_pieces), unless the
        # caller needs it whole.
        import keras
        import numpy as np

        value = variable.value
        if not whole and _sharded(value):
            return _host_pieces(value)
        return np.array(keras.ops.convert_to_numpy(value), copy=True)

    def own_pieces(self, variable: Any) -> HostPieces | None:
        value = variable.value
        return _host_pieces(value) if _sharded(value) else None

    def assign_pieces(self, variable: Any, pieces: HostPieces, dtype: Any) -> None:
        # Each device gets its own region, read from the pieces that cover
        # it: no whole copy of a sharded variable is made on the host.
        import jax

        value = variable.value
        if not _sharded(value):
            variable.assign(pieces.whole().astype(dtype, copy=False))
            return
        variable.assign(
            jax.make_array_from_callback(
                tuple(pieces.shape),
                value.sharding,
                lambda index: pieces.region(index).astype(dtype, copy=False),
            )
        )

    def fused_reader(self, variables: list[Any]) -> Callable[[], list[Any]] | None:
        return None


# --- JAX's epoch data: NumPy batches, no tf.data ---------------------------


def numpy_epoch(
    make_dataset: Callable[..., Any],
    epoch: int,
    *,
    skip: int,
    steps_per_epoch: int,
    position: GrainPosition | None = None,
    kind: bool = False,
) -> Any:
    """JAX: ``make_dataset(epoch)``'s NumPy batches after ``skip``, as a generator
    (:func:`colab_resume.backend.numpy_batches.epoch_batches`), or with
    ``kind`` of the kind it returned, as ``fit`` would get it
    (:func:`colab_resume.backend.numpy_batches.epoch_input`).

    Raises:
        DatasetError: it is a ``tf.data.Dataset``, not iterable, or too short.
    """

    def refuse_tensorflow(dataset: Any) -> None:
        if type(dataset).__module__.startswith("tensorflow"):
            raise DatasetError(
                f"make_dataset({epoch}) returned a {type(dataset).__name__}; on the "
                f"JAX backend it must return NumPy batches (a list or generator of "
                f"(x, y) tuples of arrays, or a keras.utils.PyDataset), so "
                f"TensorFlow is not needed."
            )

    return (epoch_input if kind else epoch_batches)(
        make_dataset,
        epoch,
        skip=skip,
        steps_per_epoch=steps_per_epoch,
        check=refuse_tensorflow,
        position=position,
    )


def first_batch(make_dataset: Callable[..., Any], epoch: int) -> Any:
    """JAX: the first batch of ``make_dataset(epoch)`` (None if it is empty)."""
    return next(numpy_epoch(make_dataset, epoch, skip=0, steps_per_epoch=1), None)


def check_fed_batch(batch: Any, devices: int, epoch: int) -> None:
    """:func:`check_numpy_batch` of what this process feeds, agreed first.

    With ``data_sharding="per_process"`` the processes' shapes are compared
    (a collective) before the local check: a shard that only one process
    finds wrong would fail it alone, and the others would wait for it in
    their next collective.
    """
    if jax_distributed.shards_given():
        jax_distributed.agree_first_batch(batch)
    check_numpy_batch(batch, devices, epoch)


def check_numpy_batch(batch: Any, replicas: int, epoch: int) -> None:
    """JAX: refuse a first batch that cannot be split evenly over ``replicas``.

    Raises:
        DatasetError: its size is not a multiple of ``replicas``.
    """
    import keras

    arrays = keras.tree.flatten(batch) if batch is not None else []
    shape = getattr(arrays[0], "shape", ()) if arrays else ()
    if replicas > 1 and shape and int(shape[0]) % replicas:
        size = int(shape[0])
        good = max(replicas, size - size % replicas)
        raise DatasetError(
            f"make_dataset({epoch}) yields batches of {size} examples, which "
            f"cannot be split evenly over {replicas} devices. Batch by a multiple "
            f"of {replicas} (e.g. {good}) — the global batch — and drop the last "
            f"short batch."
        )


def _fed_devices() -> int:
    """The devices one of ``make_dataset``'s batches is split over."""
    if jax_distributed.shards_given():  # this process's rows: its own devices
        return replicas() // jax_distributed.process_count()
    return replicas()


# --- sharded state, to the host by the piece --------------------------------


def _sharded(value: Any) -> bool:
    """Whether ``value`` is a ``jax.Array`` split over devices (not whole on each)."""
    sharding = getattr(value, "sharding", None)
    return sharding is not None and not sharding.is_fully_replicated


def _host_pieces(value: Any) -> HostPieces:
    """The distinct shards of ``value`` this process holds, copied to the host.

    Replica 0 of each shard only: a shard replicated over a mesh axis is
    copied once, by the one device that holds replica 0 of it (in a
    multi-process run, by one process).
    """
    import numpy as np

    pieces = []
    for shard in value.addressable_shards:
        if shard.replica_id != 0:
            continue
        starts = tuple(
            axis.indices(n)[0] for axis, n in zip(shard.index, value.shape, strict=True)
        )
        # A view of the device buffer (the CPU's), then our own copy: the
        # buffer is donated to the next step. (np.array(..., copy=True) of a
        # jax.Array took several times as long.)
        pieces.append((starts, np.asarray(shard.data).copy()))
    return HostPieces(shape=tuple(int(n) for n in value.shape), pieces=pieces)
