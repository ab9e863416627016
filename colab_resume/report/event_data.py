"""The details of an event that the history keeps beside its message.

A history chunk keeps each event's message cut to 300 characters, which
is enough for people but not for readers that need figures: the changes
a ``run.runtime_changed`` event lists run past the cut as soon as the
library versions changed, and a ``checkpoint.committed`` event's bytes
are not in its words at all. So a few kinds keep a few of their details,
each checked here against what the agent writes: the recorder keeps what
checks out, a reader keeps what checks out of an untrusted chunk and
ignores the rest (a newer writer's details, damage), and the live panel
reads an event's details through the same check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from colab_resume.parsing import MAX_INT

RUNTIME_CHANGED = "run.runtime_changed"
COMMITTED = "checkpoint.committed"
# A list of changes longer than any runtime's fields, a change longer than
# the two values the agent cuts to 120 characters each.
MAX_CHANGES = 64
MAX_CHANGE_CHARS = 300
MAX_MODE_CHARS = 16


def _size(value: Any) -> bool:
    whole = isinstance(value, int) and not isinstance(value, bool)
    return whole and 0 <= value <= MAX_INT


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _mode(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_MODE_CHARS


def _changes(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= MAX_CHANGES
        and all(isinstance(c, str) and len(c) <= MAX_CHANGE_CHARS for c in value)
    )


# kind -> detail -> the check its value passes.
KEPT: dict[str, dict[str, Callable[[Any], bool]]] = {
    RUNTIME_CHANGED: {"changes": _changes, "bitwise": _flag},
    COMMITTED: {
        "bytes": _size,
        "uploaded_bytes": _size,
        "shared_bytes": _size,
        "frozen": _mode,
    },
}


def kept(kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The details of a ``kind`` event the history keeps: those listed in
    :data:`KEPT` whose value checks out (nothing for other kinds)."""
    checks = KEPT.get(kind)
    if not checks:
        return {}
    return {
        name: data[name]
        for name, check in checks.items()
        if name in data and check(data[name])
    }
