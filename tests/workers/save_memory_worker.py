"""Subprocess side of tests/test_save_memory.py: one save's peak extra memory.

Runs in a fresh interpreter so that nothing else the test session did
(other tests' allocations, the emulator's client) moves the high-water
mark it reads.

Usage: python tests/workers/save_memory_worker.py RUN_DIR ENDPOINT STATE_MB
Prints ``PEAK <extra bytes> <state bytes> <python bytes>``.

The kernel's RSS high-water mark is reset (``/proc/self/clear_refs``) after
two warm-up saves; a save starts; every variable is then updated, as a
training step does, which makes TensorFlow copy each variable the snapshot
still holds. The upload thread starts writing only once that is done (the
one stand-in: it waits on an event before the real sync), so the whole
snapshot is held while the shards are written and uploaded: the worst case.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import tracemalloc

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from colab_resume.checkpoint import CheckpointManager  # noqa: E402
from colab_resume.checkpoint.formats.portable import ArrayState  # noqa: E402
from colab_resume.events import EventLog  # noqa: E402
from colab_resume.storage import Storage  # noqa: E402


def status_bytes(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def main() -> None:
    run_dir, endpoint, mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
    updated = threading.Event()
    updated.set()
    sync = ArrayState.sync

    def held_sync(self: ArrayState) -> None:
        updated.wait()
        sync(self)

    ArrayState.sync = held_sync  # type: ignore[method-assign]
    storage = Storage(run_dir, {"token": "anon", "endpoint_url": endpoint})
    shape = [1024, 1024]  # 4 MiB float32 variables, like a mid-sized model's
    state = {"v": [tf.Variable(tf.fill(shape, float(i))) for i in range(mb // 4)]}
    nbytes = sum(int(v.numpy().nbytes) for v in state["v"])
    manager = CheckpointManager(storage, lease=1, fence=lambda: None, events=EventLog())
    for step in (1, 2):
        manager.save(state, step=step, epoch=0)
        manager.wait()
        manager.check()
    one = tf.ones(shape)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # reset VmHWM to the current RSS
    base = status_bytes("VmRSS")
    tracemalloc.start()
    updated.clear()
    manager.save(state, step=3, epoch=0)
    for v in state["v"]:
        v.assign_add(one)
    updated.set()
    manager.wait()
    manager.check()
    python = tracemalloc.get_traced_memory()[1]
    extra = status_bytes("VmHWM") - base
    manager.close()
    print(f"PEAK {extra} {nbytes} {python}", flush=True)


if __name__ == "__main__":
    main()
