"""A sharded JAX state's save, side by side: by the piece, gathered whole, Orbax.

Not a test: it prints a markdown table measured in one run. Keras on JAX
with 8 CPU devices; the model of ``tests/on_jax/sharded_worker.py`` (two
Dense layers of ``--width`` units and a one-unit head) whose kernels and
biases a ``ModelParallel`` shards over the ``"model"`` axis of a (2, 4)
mesh, with Adam: at the default width its state (weights and Adam's
slots) is 1.23 GB. Each contender runs in a fresh process of its own: one
training step and a warm-up save, then ``--saves`` saves to local disk,
a training step before each (at a width of a few hundred the pieces are
small enough for the allocator to reuse freed memory, and the peaks say
nothing). The contenders:

- ``pieces``: the checkpoint manager the agent drives (its portable
  format reads each distinct shard to the host once);
- ``gathered``: the same manager with every variable read whole, as it
  was before sharded saves (this bench patches the JAX backend's
  ``read_value`` to ``whole=True``; nothing else changes);
- ``orbax``: Keras' own ``keras.callbacks.OrbaxCheckpoint`` on the same
  model, ``save_freq=1``: its ``on_train_batch_end`` hook, which ``fit``
  calls after each batch, starts the save; ``wait_until_finished()``
  waits for it.

Measured per save: the seconds the save blocks the caller and until it is
durable (the manager's commit; Orbax's finalized step); the bytes read to
the host (the manager: what its backend's ``read_value`` returns, pieces
or whole arrays; Orbax: the replica slices its
``replica_slices.transfer_arrays_to_host`` returns, and how many of those
bytes are copies rather than views of the CPU devices' own buffers); the
bytes the new checkpoint takes on disk; the peak extra host memory (RSS
sampled every 10 ms from the save's start until it is durable, minus the
RSS before it; the kernel's high-water mark, ``VmHWM``, reset before the
save, as a check).

Orbax is not in ``build/venv-jax`` (and must not be: the JAX suite runs
without it). This bench runs in a virtualenv of its own:

    python3 -m venv build/venv-bench-jax
    build/venv-bench-jax/bin/pip install "jax[cpu]" keras orbax-checkpoint psutil -e .
    build/venv-bench-jax/bin/python bench/bench_sharded_save.py [--width 7168]
        [--saves 3] [--contenders pieces gathered orbax]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "on_jax"))  # the sharded model
sys.path.insert(0, HERE)

from bench_checkpoint import PeakRSS  # noqa: E402
from bench_save_memory import reset_high_water, status_kb  # noqa: E402

DEVICES = 8
MESH = "2,4"  # ("batch", "model"): each kernel in 4 pieces, each piece on 2 devices
CONTENDERS = {
    "pieces": "colab_resume, by the piece",
    "gathered": "colab_resume, each variable gathered whole (before)",
    "orbax": "Keras `OrbaxCheckpoint`",
}


class Counter:
    """Bytes a save read to the host, and how many of them it copied."""

    def __init__(self) -> None:
        self.read = self.copied = 0


def count_manager_reads(counter: Counter, *, gather: bool) -> None:
    """Count what the JAX backend's ``read_value`` hands the portable format
    (always copies: Keras' JAX trainer donates the state's buffers); with
    ``gather``, read every variable whole, as before sharded saves."""
    from colab_resume.backend.jax import JaxBackend

    read = JaxBackend.read_value

    def counted(self: Any, variable: Any, *, whole: bool = False) -> Any:
        value = read(self, variable, whole=whole or gather)
        counter.read += int(value.nbytes)
        counter.copied += int(value.nbytes)
        return value

    JaxBackend.read_value = counted  # type: ignore[method-assign]


def count_orbax_reads(counter: Counter) -> None:
    """Count the replica slices Orbax transfers to the host. On a CPU
    device ``np.asarray`` of a shard is a view of the device's buffer, not
    a copy; those bytes are read but not copied."""
    from orbax.checkpoint._src.serialization import replica_slices

    transfer = replica_slices.transfer_arrays_to_host

    def counted(arrays: Any, *args: Any, **kwargs: Any) -> Any:
        result = transfer(arrays, *args, **kwargs)
        device = {
            shard.data.unsafe_buffer_pointer()
            for array in arrays
            for shard in array.addressable_shards
        }
        for slices in result:
            for piece in slices.replica_slices:
                data = piece.unsliced_data
                counter.read += int(data.nbytes)
                if data.ctypes.data not in device:
                    counter.copied += int(data.nbytes)
        return result

    replica_slices.transfer_arrays_to_host = counted


class ManagerSaves:
    """The checkpoint manager, built and driven as the agent drives it."""

    def __init__(self, model: Any, work: str) -> None:
        from colab_resume.checkpoint import CheckpointManager
        from colab_resume.events import EventLog
        from colab_resume.protocol.rundir import CHECKPOINT_DIR
        from colab_resume.storage import Storage

        self.model = model
        self.root = os.path.join(work, "run", CHECKPOINT_DIR)
        self.manager = CheckpointManager(
            Storage(os.path.join(work, "run")),
            lease=1,
            fence=lambda: None,
            events=EventLog(),
            staging_dir=os.path.join(work, "staging"),
            keep=2,
        )

    def save(self, step: int) -> None:
        self.manager.save(self.model, step=step, epoch=0)

    def durable(self) -> None:
        self.manager.wait()
        self.manager.check()

    def close(self) -> None:
        self.manager.close()


class OrbaxSaves:
    """Keras' ``OrbaxCheckpoint``, saving after every batch."""

    def __init__(self, model: Any, work: str) -> None:
        import keras

        self.root = os.path.join(work, "orbax")
        self.callback = keras.callbacks.OrbaxCheckpoint(
            directory=self.root, save_freq=1, max_to_keep=2
        )
        self.callback.set_model(model)
        self.batch = 0

    def save(self, step: int) -> None:
        # What fit calls after each batch; save_freq=1 saves there.
        self.callback.on_train_batch_end(self.batch)
        self.batch += 1

    def durable(self) -> None:
        self.callback.wait_until_finished()

    def close(self) -> None:
        self.callback.on_train_end()


def tree_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(path)
        for name in names
    )


def entries(path: str) -> set[str]:
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def state_bytes(model: Any) -> tuple[int, int]:
    """The state's bytes (each element once), and what the devices hold
    (a piece replicated over the ``"batch"`` axis counts twice)."""
    import jax
    import numpy as np

    leaves = jax.tree.leaves(model.get_state_tree())
    distinct = sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in leaves)
    held = sum(s.data.nbytes for a in leaves for s in a.addressable_shards)
    return distinct, held


def measure(
    saver: ManagerSaves | OrbaxSaves, step: int, counter: Counter
) -> dict[str, Any]:
    import gc

    before = entries(saver.root)
    counter.read = counter.copied = 0
    gc.collect()
    reset_high_water()
    rss = PeakRSS()
    began = time.perf_counter()
    saver.save(step)
    blocking = time.perf_counter() - began
    saver.durable()
    seconds = time.perf_counter() - began
    sampled = rss.stop()
    high_water = status_kb("VmHWM") - rss.base
    new = entries(saver.root) - before
    return {
        "blocking": blocking,
        "seconds": seconds,
        "peak": sampled,
        "high_water": high_water,
        "read": counter.read,
        "copied": counter.copied,
        "disk": sum(tree_bytes(os.path.join(saver.root, n)) for n in new),
    }


def child(name: str, width: int, saves: int) -> dict[str, Any]:
    """One contender's saves, in this fresh process."""
    os.environ["KERAS_BACKEND"] = "jax"
    flag = f"--xla_force_host_platform_device_count={DEVICES}"
    os.environ["XLA_FLAGS"] = flag
    import shutil
    from importlib.metadata import PackageNotFoundError, version

    import numpy as np
    from sharded_worker import build

    model = build(MESH, width)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, width)).astype("float32")
    y = x[:, :1]
    model.train_on_batch(x, y)  # compiled; Adam's slots built
    counter = Counter()
    if name == "orbax":
        count_orbax_reads(counter)
    else:
        count_manager_reads(counter, gather=name == "gathered")
    distinct, held = state_bytes(model)
    work = tempfile.mkdtemp(prefix="bench-sharded-")
    saver: ManagerSaves | OrbaxSaves = (
        OrbaxSaves(model, work) if name == "orbax" else ManagerSaves(model, work)
    )
    runs = []
    try:
        for step in range(1, saves + 2):  # the first save warms up: not counted
            model.train_on_batch(x, y)
            found = measure(saver, step, counter)
            if step > 1:
                runs.append(found)
            print(f"[{name}] save {step}: {json.dumps(found)}", file=sys.stderr)
        saver.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    found_versions = {}
    for package in ("jax", "keras", "orbax-checkpoint"):
        try:
            found_versions[package] = version(package)
        except PackageNotFoundError:  # no Orbax: --contenders pieces gathered
            found_versions[package] = "absent"
    return {"state": distinct, "held": held, "runs": runs, "versions": found_versions}


def run_child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    print(f"{name}: running", file=sys.stderr, flush=True)
    command = [sys.executable, __file__, "--child", name]
    command += ["--width", str(args.width), "--saves", str(args.saves)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{name} failed:\n{done.stderr[-4000:]}")
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    return result


def table(found: dict[str, dict[str, Any]], saves: int) -> list[str]:
    """One row a contender; ratios in brackets against by the piece."""

    def median(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in found[name]["runs"]))

    def most(name: str, key: str) -> float:
        return float(max(r[key] for r in found[name]["runs"]))

    def against(
        name: str, key: str, pick: Callable[[str, str], float], floor: float = 0.0
    ) -> str:
        ours = pick("pieces", key) if "pieces" in found else 0.0
        return f" ({pick(name, key) / ours:.2f}x)" if ours > floor else ""

    lines = [
        f"| contender | read to host per save (of it copied) | on disk "
        f"| blocking s, median of {saves} | s until durable, median "
        f"| peak extra RSS, max of {saves} | peak ÷ state | VmHWM check ÷ state |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in found:
        state = found[name]["state"]
        lines.append(
            f"| {CONTENDERS[name]} "
            f"| {median(name, 'read') / 1e9:.2f} GB "
            f"({median(name, 'copied') / 1e9:.2f} GB) "
            f"| {median(name, 'disk') / 1e9:.2f} GB "
            f"| {median(name, 'blocking'):.2f}{against(name, 'blocking', median)} "
            f"| {median(name, 'seconds'):.2f}{against(name, 'seconds', median)} "
            # A peak under 5% of the state is the allocator's noise: no ratio.
            f"| {most(name, 'peak') / 1e9:.2f} GB"
            f"{against(name, 'peak', most, 0.05 * state)} "
            f"| **{most(name, 'peak') / state:.2f}x** "
            f"| {most(name, 'high_water') / state:.2f}x |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=7168)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument(
        "--contenders", nargs="+", choices=list(CONTENDERS), default=list(CONTENDERS)
    )
    parser.add_argument("--child", choices=list(CONTENDERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = child(args.child, args.width, args.saves)
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")
        return 0
    began = time.monotonic()
    found = {name: run_child(name, args) for name in args.contenders}
    first = found[args.contenders[0]]
    versions = ", ".join(f"{p} {v}" for p, v in first["versions"].items())
    print()
    print(
        f"python bench/bench_sharded_save.py {' '.join(sys.argv[1:])}".rstrip()
        + f"  ({time.monotonic() - began:.0f} s; {os.cpu_count()} cores, "
        f"{DEVICES} CPU devices; {versions})"
    )
    print()
    print(
        f"State {first['state'] / 1e9:.2f} GB (two Dense kernels of {args.width}², "
        f"their Adam slots; each element once); the devices hold "
        f"{first['held'] / 1e9:.2f} GB (a ({MESH}) mesh: each piece on 2 "
        f"devices). Ratios in brackets: against by the piece."
    )
    print()
    for line in table(found, args.saves):
        print(line)
    if "pieces" in found:
        peak = max(r["peak"] for r in found["pieces"]["runs"])
        ratio = peak / found["pieces"]["state"]
        verdict = "holds" if ratio <= 1.1 else "does NOT hold"
        print()
        print(
            f"Target: a save's peak extra host memory <= 1.1x the state's bytes: "
            f"{verdict} ({ratio:.2f}x)."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
