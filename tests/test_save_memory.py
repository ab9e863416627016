"""A save holds one host copy of the state plus bounded staging, no more.

The peak extra memory of a save of a ~200 MB state (TensorFlow on the CPU,
uploaded to the GCS emulator) is read from the kernel's RSS high-water mark
in a fresh process (tests/workers/save_memory_worker.py), in the worst case:
every variable updated by training before the upload thread writes a
shard, so the whole snapshot is alive while the shards are written and
uploaded. Memory, unlike time, does not depend on how loaded the machine is.
"""

from __future__ import annotations

import sys

import pytest
from support.processes import run_worker

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/status"
)

# The goal (issue 26): one host copy of the state plus bounded staging,
# 1.1x in all. The parts: TensorFlow's own slack on its copies of the
# updated variables (measured 4%: 218 MB for 210 MB of variables), and the
# uploads, which stream each shard from its file a 1 MiB read at a time
# (storage/gcs.py), beside the HTTP client's buffers. Measured 2026-12-03:
# 1.05x, three runs out of three. Before uploads streamed, their pieces
# (4 to 8 MiB, a request each) put it at 1.10x to 1.16x.
BOUND = 1.1


def bound(state: int) -> float:
    return BOUND * state


def test_peak_extra_memory_of_a_save_is_one_copy_plus_bounded_staging(
    gcs_run_dir, gcs_options
):
    result = run_worker(
        "save_memory_worker", gcs_run_dir, gcs_options["endpoint_url"], "200"
    )
    extra, state, python = (int(x) for x in result.last("PEAK ").split()[1:])
    assert state > 190e6
    # Nothing the save does in Python or NumPy is of the state's order: no
    # serialisation copy, no whole shard read back for the upload.
    assert python < state / 8, (python, state)
    # The snapshot itself (TensorFlow's copies of the updated variables) is
    # there: the measurement saw the worst case it is meant to bound.
    assert extra > 0.8 * state, (extra, state)
    assert extra <= bound(state), (
        f"{extra / state:.2f}x the state, over {bound(state) / state:.2f}x"
    )
