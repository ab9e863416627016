"""Where the run stands, printed in the cell when no panel shows it.

Warnings and errors reach a notebook through :mod:`logging` (its
last-resort handler prints them under the cell). Info events go to
``logging`` at INFO, which nothing prints unless the user configured it,
so without a panel a user never read "run completed" or "it cannot go
back". :class:`ConsoleSink` prints the few info events that say where the
run stands (:data:`HEADLINES`), once each, unless a displayed panel or the
user's own logging shows them already.
"""

from __future__ import annotations

import logging
import sys
from typing import IO

from colab_resume.events import Event
from colab_resume.events import log as events_log

# Info events that change where the run stands. The rest are detail
# (commits, retention, uploads) the panel and the logs keep.
HEADLINES = (
    "lease.previous_dead",  # the last session is dead: this one takes over
    "run.already_completed",  # nothing to train (or: it cannot go back)
    "run.extended",  # a finished run asked for more steps
    "run.paused",
    "run.resumed",
    "run.completed",
)


class ConsoleSink:
    """An :class:`~colab_resume.events.EventLog` subscriber; see the module docstring.

    Args:
        out: where to print; None: ``sys.stdout`` at each print (a notebook
            swaps it per cell).
    """

    def __init__(self, out: IO[str] | None = None) -> None:
        self._out = out
        self.panel_shown = False  # set by a panel displayed in a kernel

    def __call__(self, event: Event) -> None:
        if event.kind not in HEADLINES or event.level != "info":
            return  # warnings and errors: logging prints them already
        if self.panel_shown or _logging_shows(events_log, logging.INFO):
            return
        out = self._out if self._out is not None else sys.stdout
        print(f"colab_resume: {event.message}", file=out, flush=True)


def _logging_shows(logger: logging.Logger, level: int) -> bool:
    """The user's logging prints ``logger`` at ``level`` (no double lines)."""
    return logger.isEnabledFor(level) and logger.hasHandlers()
