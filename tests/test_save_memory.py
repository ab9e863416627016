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

from colab_resume.checkpoint.manager import staging_bytes

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/status"
)

# The bound is the documented one (docs/guide/checkpoints.md), part by part:
# one host copy of the state, with TensorFlow's own slack on its copies of
# the updated variables (measured 4%: 218 MB for 210 MB of variables);
# the upload's staging (a sixteenth of the state, 13 MB here); and the HTTP
# client's buffers, about 15 MB. Measured 2026-12-03: the upload added 2 to
# 26 MB to the snapshot, as the allocator kept freed pieces resident or
# not; the whole peaked at 1.10x to 1.16x. The bound is 1.18x at 200 MB.
TF_COPY_SLACK = 1.05
CLIENT_BUFFERS = 15_000_000


def bound(state: int) -> float:
    return TF_COPY_SLACK * state + staging_bytes(state) + CLIENT_BUFFERS


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
