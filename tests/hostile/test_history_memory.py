"""Reading a long run's history costs bounded memory, however many chunks.

Each chunk is capped (1 MiB, 5,000 points), but nothing bounded their sum:
parsed, a full chunk costs megabytes, and ``report`` and the panels kept
every point of every chunk. Old chunks are now thinned to an even share
of a fixed budget; the newest keep full resolution.
"""

from __future__ import annotations

import json
import tracemalloc

from colab_resume.report.history import MAX_POINTS_PER_CHUNK, HistoryReader, chunk_path
from colab_resume.storage import Storage

# 100,000 points. Unbounded reading held ~3.4 MB per full chunk (above 200
# MB for 60 chunks); the thinned reader peaks at ~14 MB whatever the count.
CHUNKS = 20
PEAK_BOUND = 32 << 20
POINTS_BOUND = 30_000  # the reader's budget plus its full-resolution chunks


def full_chunk(seq: int) -> bytes:
    points = [
        [
            seq * MAX_POINTS_PER_CHUNK + i,
            1.7e9 + seq * MAX_POINTS_PER_CHUNK + i,
            {"loss": 0.5, "acc": 0.25},
        ]
        for i in range(MAX_POINTS_PER_CHUNK)
    ]
    record = {
        "format": 1,
        "lease": 1,
        "seq": seq,
        "session_id": "s",
        "written_at": 1.7e9,
        "points": points,
        "events": [],
    }
    data = json.dumps(record).encode()
    assert len(data) <= 1 << 20  # every chunk within the writer's caps
    return data


def test_many_full_chunks_are_read_in_bounded_memory(tmp_path):
    storage = Storage(str(tmp_path / "run"))
    for seq in range(CHUNKS):
        storage.write_bytes(chunk_path(1, seq), full_chunk(seq))

    reader = HistoryReader(storage, workers=4)
    tracemalloc.start()
    try:
        history = reader.read()
        again = reader.read()  # the panel's next poll reuses the thinned cache
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BOUND, f"peak {peak / 1e6:.0f} MB"
    assert len(history.points) <= POINTS_BOUND
    assert len(again.points) == len(history.points)
    steps = [p.step for p in history.points]
    assert steps == sorted(steps) and steps[-1] == CHUNKS * MAX_POINTS_PER_CHUNK - 1
    assert steps[0] < MAX_POINTS_PER_CHUNK  # the start of the run is still drawn
    assert not history.problems
