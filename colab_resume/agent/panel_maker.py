"""How ``agent.panel()`` makes its panel: registered from above the agent.

The panel (:mod:`colab_resume.panel`) draws an agent and imports it; the
agent never imports the panel (docs/DESIGN.md §3: dependencies point
down). So the panel package registers its maker here as it is imported,
which ``import colab_resume`` does, and the agent asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from colab_resume.agent.console import ConsoleSink
from colab_resume.storage import Storage

PanelMaker = Callable[[Any, Storage, ConsoleSink], Any]

_maker: list[PanelMaker] = []


def register(maker: PanelMaker) -> None:
    """Make every later ``agent.panel()`` with ``maker(agent, storage, console)``."""
    _maker[:] = [maker]


def make(agent: Any, storage: Storage, console: ConsoleSink) -> Any:
    """The panel of ``agent``.

    Raises:
        RuntimeError: no panel was registered (``colab_resume.panel`` was
            never imported, which ``import colab_resume`` does).
    """
    if not _maker:
        raise RuntimeError(
            "agent.panel(): no panel is registered; `import colab_resume` "
            "(it imports colab_resume.panel, which registers it) and try again."
        )
    return _maker[0](agent, storage, console)
