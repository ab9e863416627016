"""The notebook panel: see and steer a run (docs/DESIGN.md §2 "Widgets in Colab").

``agent.panel()`` shows the agent of this notebook and steers it;
``cr.panel(run_dir)`` watches a run that lives in another session. Neither
import ipywidgets until a panel is made. Importing it registers how
``agent.panel()`` makes its panel (:mod:`colab_resume.agent.panel_maker`):
the agent, below, never imports the panel.
"""

from __future__ import annotations

from typing import Any

from colab_resume.agent import panel_maker
from colab_resume.agent.console import ConsoleSink
from colab_resume.storage import Storage


def panel(run_dir: str, storage_options: dict[str, Any] | None = None) -> Any:
    """A read-only panel of the run in ``run_dir`` (it may train elsewhere).

    Display it, then call its ``watch(seconds)`` in the same cell to keep it
    live (and its buttons working) while that cell runs::

        p = cr.panel("gs://bucket/runs/mnist"); display(p); p.watch(600)

    Returns:
        An ipywidgets ``VBox`` with ``refresh()`` and ``watch()``.
    """
    from colab_resume.panel.monitor import monitor_panel

    return monitor_panel(run_dir, storage_options)


def _agent_panel(agent: Any, storage: Storage, console: ConsoleSink) -> Any:
    from colab_resume.panel.live import agent_panel

    return agent_panel(agent, storage, console)


panel_maker.register(_agent_panel)

__all__ = ["panel"]
