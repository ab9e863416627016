"""``colab-resume status`` names a session that resumed on another runtime.

The sessions here are real leases and beats (:class:`RunSession`), their
events recorded by the agent's own :class:`HistoryRecorder`, and the
runtime change emitted by the agent's own
:func:`~colab_resume.agent.runtime_facts.announce`: what ``status`` reads
is what a resumed session writes.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from colab_resume.agent import runtime_facts
from colab_resume.cli import main
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.report.history import (
    MAX_MESSAGE_CHARS,
    HistoryRecorder,
    RecordedEvent,
    chunk_path,
    read_history,
)
from colab_resume.report.runtime_change import RuntimeChange
from colab_resume.report.sessions import read_report
from colab_resume.storage import Storage

RESUMED_AT = 6


def runtime(
    keras: str, mesh: list[int], colab: str, jax: str = "0.7.0"
) -> dict[str, Any]:
    """A runtime as a checkpoint records it (runtime_facts.facts)."""
    return {
        "backend": "jax",
        "processes": 1,
        "kind": "tpu",
        "chip": "v5e",
        "replicas": 8,
        "precision": "mixed_bfloat16",
        "distribution": {"kind": "ModelParallel", "mesh": mesh, "set_by": "user"},
        "versions": {
            "python": "3.12.11",
            "keras": keras,
            "jax": jax,
            "jaxlib": jax,
            "colab": colab,
        },
    }


SAVED = runtime("3.14.0", [2, 4], "release-colab_20260101-060000_RC00")
UPGRADED = runtime("3.15.0", [4, 2], "release-colab_20260301-060000_RC00", "0.7.2")
RETAGGED = runtime("3.14.0", [2, 4], "release-colab_20260301-060000_RC00")


class Run:
    """A run directory its sessions write to as the agent does."""

    def __init__(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        self.url = str(tmp_path / "run")
        self.storage = Storage(self.url)
        self.events = EventLog()
        self.recorder = HistoryRecorder(self.events)

    def session(
        self, now: dict[str, Any] | None = None, *, refuse: bool = False
    ) -> None:
        """One session: it takes the run, says how its runtime differs
        from the checkpoint's (``now``; None: the same), trains and stops."""
        session = RunSession.open(self.storage, SessionOptions(), events=self.events)
        self.recorder.start(self.storage, session.lease, session.session_id)
        end = "stopped"
        try:
            if now is not None:
                runtime_facts.announce(
                    self.events, SAVED, now, step=RESUMED_AT, refuse=refuse
                )
            session.update(state="training", step=RESUMED_AT + 3)
        except runtime_facts.RuntimeChangedError:
            end = "failed"
        finally:
            self.recorder.flush(wait=True)
            session.close(end)

    def status(self, *flags: str) -> str:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert main(["status", self.url, *flags]) == 0
        return out.getvalue()


def test_status_names_the_change_the_resumed_session_made(tmp_path):
    run = Run(tmp_path)
    run.session()
    run.session(UPGRADED)
    [event] = run.events.recent(kind="run.runtime_changed")
    # The history cuts the message before it lists every change.
    assert event.data["changes"][-1] not in event.message[:MAX_MESSAGE_CHARS]
    line = [line for line in run.status().splitlines() if "runtime:" in line]
    assert line == [
        "  runtime: changed since step 6 — distribution.mesh [2, 4] -> [4, 2], "
        "versions.colab release-colab_20260101-060000_RC00 -> "
        "release-colab_20260301-060000_RC00, "
        "versions.jax 0.7.0 -> 0.7.2, versions.jaxlib 0.7.0 -> 0.7.2, "
        "versions.keras 3.14.0 -> 3.15.0; the end may not be bitwise"
    ]
    found = json.loads(run.status("--json"))["runtime_changed"]
    assert found == {
        "session": 2,
        "step": 6,
        "changes": event.data["changes"],
        "bitwise": False,
    }
    # --brief reads no history: the verdict alone.
    assert "runtime:" not in run.status("--brief")


def test_a_later_session_on_the_same_runtime_still_says_since_when(tmp_path):
    run = Run(tmp_path)
    run.session()
    run.session(UPGRADED)
    run.session()  # resumed from session 2's runtime: nothing changed then
    text = run.status()
    assert "runtime: changed since step 6 (session 2) — distribution.mesh" in text
    assert "the end may not be bitwise" in text
    assert json.loads(run.status("--json"))["runtime_changed"]["session"] == 2


def test_a_new_colab_tag_alone_keeps_the_end_bitwise(tmp_path):
    run = Run(tmp_path)
    run.session()
    run.session(RETAGGED)
    assert "; the end can still be bitwise" in run.status()
    assert json.loads(run.status("--json"))["runtime_changed"]["bitwise"] is True


@pytest.mark.parametrize("now", [None, "refused"])
def test_no_line_where_no_session_trained_on_another_runtime(tmp_path, now):
    run = Run(tmp_path)
    run.session()
    if now == "refused":  # on_runtime_change="refuse": nothing was trained
        run.session(UPGRADED, refuse=True)
    assert "runtime:" not in run.status()
    assert json.loads(run.status("--json"))["runtime_changed"] is None
    if now == "refused":  # the report still names it, as a refusal
        [last] = read_report(run.storage).sessions[-1:]
        assert "refused to resume on another runtime: distribution.mesh" in (
            last.describe()
        )


def test_a_history_from_before_the_details_is_read_from_the_message():
    """Chunks written before events kept their details: the changes are
    read from the message, "[2, 4]" not split apart."""
    events = EventLog()
    runtime_facts.announce(
        events, SAVED, dict(SAVED, replicas=4, distribution=UPGRADED["distribution"]),
        step=RESUMED_AT,
    )  # fmt: skip
    [event] = events.recent()
    old = RecordedEvent(
        event.time, event.kind, event.level, event.step, event.message, 3
    )
    change = RuntimeChange.of(old)
    assert change is not None
    assert change.changes == ("replicas 8 -> 4", "distribution.mesh [2, 4] -> [4, 2]")
    assert change.bitwise is False and change.step == RESUMED_AT
    assert not change.refused
    cut = RecordedEvent(0.0, event.kind, "warning", 6, event.message[:60], 3)
    lost = RuntimeChange.of(cut)
    assert lost is not None and lost.words == "see its run.runtime_changed event"
    assert lost.bitwise is None


def test_a_chunks_details_are_kept_only_where_they_check_out(tmp_path):
    """Details are untrusted like the rest of a chunk: those of the wrong
    type, of kinds that keep none, or unknown to this version are dropped,
    and the chunk is still read."""
    storage = Storage(str(tmp_path / "run"))
    event = {"time": 1.0, "level": "info", "step": 4, "message": "m"}
    storage.write_json(
        chunk_path(1, 0),
        {"format": 1, "lease": 1, "seq": 0, "session_id": "s", "written_at": 1.0,
         "points": [], "events": [
            dict(event, kind="checkpoint.committed", data={
                "bytes": -1, "uploaded_bytes": 5, "shared_bytes": True,
                "frozen": "x" * 100, "from_a_newer_writer": 1}),
            dict(event, kind="run.runtime_changed", data={
                "changes": ["a -> b", 3], "bitwise": "no"}),
            dict(event, kind="lease.taken", data={"bytes": 1}),
            dict(event, kind="checkpoint.committed", data=["not", "a", "dict"]),
         ]},
    )  # fmt: skip
    history = read_history(storage)
    assert not history.problems
    assert [e.data for e in history.events] == [{"uploaded_bytes": 5}, {}, {}, {}]
