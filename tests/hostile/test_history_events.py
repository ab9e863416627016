"""Reading a long run's history keeps a bounded number of events.

Points were bounded (test_history_memory.py), events were not: each chunk
may hold 500, and ``report`` and the panel's Report button kept every
event of every chunk (megabytes per chunk, parsed). Old chunks now keep an
even share of a fixed budget, what the report reads from them first.
"""

from __future__ import annotations

import json
import tracemalloc

from colab_resume.report.history import (
    FULL_RESOLUTION_CHUNKS,
    MAX_EVENTS_KEPT,
    MAX_EVENTS_PER_CHUNK,
    HistoryReader,
    chunk_path,
)
from colab_resume.report.sessions import read_report
from colab_resume.storage import Storage

CHUNKS = 60  # 30,000 events in all
PEAK_BOUND = 48 << 20
EVENTS_BOUND = MAX_EVENTS_KEPT + FULL_RESOLUTION_CHUNKS * MAX_EVENTS_PER_CHUNK


def chatty_chunk(seq: int) -> bytes:
    events = [
        {
            "time": 1.7e9 + seq * MAX_EVENTS_PER_CHUNK + i,
            "kind": "fit.note",
            "level": "info",
            "step": seq * MAX_EVENTS_PER_CHUNK + i,
            "message": "x" * 300,
        }
        for i in range(MAX_EVENTS_PER_CHUNK)
    ]
    if seq == 0:  # where the session resumed, among the chatter
        events[10] = dict(events[10], kind="run.resumed_at", step=40)
    record = {
        "format": 1,
        "lease": 1,
        "seq": seq,
        "session_id": "s",
        "written_at": 1.7e9,
        "points": [[100 + seq, 1.7e9 + seq, {"loss": 0.5}]],
        "events": events,
    }
    return json.dumps(record).encode()


def test_many_chatty_chunks_keep_a_bounded_number_of_events(tmp_path):
    storage = Storage(str(tmp_path / "run"))
    for seq in range(CHUNKS):
        storage.write_bytes(chunk_path(1, seq), chatty_chunk(seq))

    reader = HistoryReader(storage, workers=4)
    tracemalloc.start()
    try:
        history = reader.read()
        again = reader.read()  # the panel's next poll reuses the thinned cache
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(history.events) <= EVENTS_BOUND, len(history.events)
    assert len(again.events) == len(history.events)
    assert peak < PEAK_BOUND, f"peak {peak / 1e6:.0f} MB"
    times = [e.time for e in history.events]
    assert times == sorted(times)
    assert times[-1] == 1.7e9 + CHUNKS * MAX_EVENTS_PER_CHUNK - 1  # the latest
    assert not history.problems
    # What the report reads from an old chunk survived the thinning.
    [session] = read_report(storage).sessions
    assert session.first_step == 40
