"""``colab-resume report RUN_DIR -o report.png``: the run's picture.

Loss over steps with each session as its own band, deaths, redone gaps and
recoveries marked, checkpoints as ticks (see :mod:`colab_resume.report.plot`).
Needs matplotlib (``pip install 'colab_resume[report]'``).
"""

from __future__ import annotations

from colab_resume.report.history import read_history
from colab_resume.storage import Storage


def report(storage: Storage, output: str) -> str:
    """Draw the report of ``storage``'s run into ``output``; returns a summary."""
    from colab_resume.report.plot import render, session_spans

    history = read_history(storage)
    png = render(history, title=storage.url)
    with open(output, "wb") as file:
        file.write(png)
    spans = session_spans(history)
    deaths = sum(1 for span in spans if span["died"])
    lines = [
        f"wrote {output}: {len(history.points)} samples, {len(spans)} sessions, "
        f"{deaths} deaths"
    ]
    lines += [f"warning: {problem}" for problem in history.problems]
    return "\n".join(lines)
