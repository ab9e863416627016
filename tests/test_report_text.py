"""The report draws text from the run (its URL, session labels) as written."""

from __future__ import annotations

from colab_resume.cli import main
from colab_resume.events import EventLog
from colab_resume.report.history import HistoryRecorder
from colab_resume.storage import Storage

PNG = b"\x89PNG\r\n\x1a\n"


def test_a_run_dir_with_dollar_signs_is_drawn_not_parsed_as_math(tmp_path):
    # matplotlib reads "$x^$" as math, and "x^" is not valid math.
    storage = Storage(str(tmp_path / "price $x^$ run"))
    events = EventLog(clock=lambda: 1000.0)
    recorder = HistoryRecorder(events, clock=lambda: 1000.0)
    recorder.start(storage, 1, "session-$^$")
    for step in range(1, 11):
        recorder.sample(step, {"loss": 1.0 / step})
    recorder.flush(wait=True)
    out = tmp_path / "report.png"
    assert main(["report", storage.url, "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG)
