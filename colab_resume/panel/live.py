"""``agent.panel()``: the panel of the agent in this notebook, with its buttons.

Buttons only set the agent's flags (save now, pause, resume, stop); the
training loop acts on them between steps. They work during ``fit`` because
the agent's once-a-second tick refreshes this panel and runs the
:class:`~colab_resume.panel.pump.KernelPump`, which handles the clicks
waiting in the kernel.

The panel uses the agent's public API only; what else it needs (the run
directory's storage, to read the report; the console, to quiet it) the
agent hands it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING

from colab_resume.panel.model import PanelFacts, facts_of, view
from colab_resume.panel.pump import KernelPump
from colab_resume.panel.widgets import PanelBox

# Annotations only, never imported at run time: the two modules name
# each other's types without an import cycle.
if TYPE_CHECKING:
    from colab_resume.agent.console import ConsoleSink
    from colab_resume.agent.core import Agent
    from colab_resume.storage import Storage

log = logging.getLogger(__name__)

# The goodput line reads the whole run directory: at most this often, on a
# thread of its own, only while the panel is displayed.
GOODPUT_EVERY_SECONDS = 60.0


class AgentPanel(PanelBox):
    """The displayed widget; see the module docstring.

    Args:
        agent: the agent shown and steered.
        storage: its run directory (the report is read from there).
        console: its event lines under the cell, quiet while the panel shows.
    """

    def __init__(self, agent: Agent, storage: Storage, console: ConsoleSink) -> None:
        super().__init__(title=f"colab_resume · {agent.run_dir}", read_only=False)
        self.agent = agent
        self._storage = storage
        self.pump = KernelPump.find()
        self.save_button.on_click(lambda _: self._save())
        self.pause_button.on_click(lambda _: self._pause_or_resume())
        self.stop_button.on_click(lambda _: self._stop())
        self.report_button.on_click(lambda _: self.draw_report())
        self._goodput = ""
        self._goodput_due = 0.0
        self._goodput_reader: threading.Thread | None = None
        # Outside a kernel nothing displays it: stay inert, cost nothing.
        if self.pump is not None:
            agent.on_progress(self.refresh)
            console.panel_shown = True  # its event lines say it all
        self.refresh()

    def __repr__(self) -> str:
        if self.pump is not None:
            return str(super().__repr__())
        # `print(agent.panel())` in a script: a widget's repr helps nobody.
        url = self.agent.run_dir
        return (
            f"colab_resume panel of {url}: it shows in a notebook only. From "
            f"a terminal, follow the run with `colab-resume watch {url}` (or "
            f"`colab-resume status {url}`)."
        )

    __str__ = __repr__

    def refresh(self) -> None:
        """Show the agent's state now, then handle waiting clicks."""
        if self.pump is not None:
            self._read_goodput_when_due()
        self.show(view(self._facts()))
        if self.pump is not None:
            self.pump.pump()

    def _facts(self) -> PanelFacts:
        return dataclasses.replace(
            facts_of(self.agent.progress()), goodput=self._goodput
        )

    def _read_goodput_when_due(self) -> None:
        """Start reading the run's goodput in the background, when due."""
        now = time.monotonic()
        busy = self._goodput_reader is not None and self._goodput_reader.is_alive()
        if busy or now < self._goodput_due or self.agent.progress().lease is None:
            return
        self._goodput_due = now + GOODPUT_EVERY_SECONDS
        self._goodput_reader = threading.Thread(
            target=self._read_goodput, name="colab-resume-goodput", daemon=True
        )
        self._goodput_reader.start()

    def _read_goodput(self) -> None:
        try:
            self._goodput = self.agent.goodput().one_line()
        except Exception as exc:  # a figure must never break the panel
            log.debug("panel: goodput not read: %s", exc)

    def _save(self) -> None:
        self.agent.save_now()
        self._answer("checkpoint asked for: it is saved at the next step")

    def _pause_or_resume(self) -> None:
        if self.agent.progress().pause_requested:
            self.agent.resume()
            self._answer("resuming at the next step")
        else:
            self.agent.pause()
            self._answer("pausing: checkpoint at the next step, then hold")

    def _stop(self) -> None:
        self.agent.stop()
        self._answer("stopping: checkpoint at the next step, then stop cleanly")

    def _answer(self, message: str) -> None:
        """Show the click's effect now; the notice stays until the run acts."""
        shown = view(self._facts())
        self.show(shown)
        self.say(message, until_changed=shown)

    def draw_report(self) -> None:
        """Draw the run report (history in the run directory) into the panel."""
        from colab_resume.report import read_report
        from colab_resume.report.plot import render

        self.agent.flush_history(timeout=10.0)
        try:
            png = render(read_report(self._storage), title=self.agent.run_dir)
        except ImportError:
            self.show_report(
                None, "the report needs matplotlib: pip install matplotlib"
            )
            return
        except Exception as exc:
            self.show_report(None, f"no report: {type(exc).__name__}: {exc}")
            return
        self.show_report(png)


def agent_panel(agent: Agent, storage: Storage, console: ConsoleSink) -> AgentPanel:
    return AgentPanel(agent, storage, console)
