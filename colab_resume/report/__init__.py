"""The run's history across sessions, and the report drawn from it.

Importing this package imports neither matplotlib nor TensorFlow.
"""

from typing import Any

from colab_resume.report.history import (
    HistoryReader,
    HistoryRecorder,
    RunHistory,
    read_history,
)
from colab_resume.report.sessions import RunReport, Session, read_report


def report_png(run_dir: str, storage_options: dict[str, Any] | None = None) -> bytes:
    """The run report of ``run_dir`` as PNG bytes (needs matplotlib)."""
    from colab_resume.report.plot import render
    from colab_resume.storage import Storage

    storage = Storage(run_dir, storage_options)
    return render(read_report(storage), title=storage.url)


__all__ = [
    "HistoryReader",
    "HistoryRecorder",
    "RunHistory",
    "RunReport",
    "Session",
    "read_history",
    "read_report",
    "report_png",
]
