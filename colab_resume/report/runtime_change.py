"""What a session's ``run.runtime_changed`` event said, as the history kept it.

The agent emits the event when a session resumes from a checkpoint written
under another runtime (:mod:`colab_resume.agent.runtime_facts`): what
changed, and whether the end can still equal an uninterrupted run's. The
history keeps both as the event's details
(:mod:`colab_resume.report.event_data`); chunks written before it did
keep only the message, cut to 300 characters, so the changes are read
from the message where they survived the cut. The report names the
change under its session; ``status`` says the newest one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from colab_resume.report.event_data import RUNTIME_CHANGED
from colab_resume.report.history import RecordedEvent

# The changes in the event's message: "(backend jax -> tensorflow, ...)."
_CHANGES = re.compile(r"\(([^()]*->[^()]*)\)\.")
# Where one change ends and the next begins: ", " before a field's name
# ("versions.keras ", "replicas "), not inside a value ("[2, 4]").
_NEXT_CHANGE = re.compile(r", (?=[a-z]\w*(?:\.[\w-]+)? )")
# How the message says the verdict (runtime_facts.bitwise).
_KEEPS_BITWISE = "Bitwise equality with an uninterrupted run still holds"
_LOSES_BITWISE = "No bitwise equality with an uninterrupted run"
UNLISTED = "see its run.runtime_changed event"


@dataclasses.dataclass(frozen=True)
class RuntimeChange:
    """One ``run.runtime_changed`` event.

    Attributes:
        lease: the session that resumed on another runtime.
        step: the step it resumed from.
        changes: what changed, as the agent worded each (``"versions.keras
            3.14.0 -> 3.15.0"``); empty where the history lost the list.
        bitwise: whether the end can still equal an uninterrupted run's;
            None where the history lost the verdict.
        refused: the session refused to train on (``on_runtime_change=
            "refuse"``, the one case the event is an error).
    """

    lease: int
    step: int | None
    changes: tuple[str, ...]
    bitwise: bool | None
    refused: bool = False

    @classmethod
    def of(cls, event: RecordedEvent) -> RuntimeChange | None:
        """The change ``event`` says, or None for an event of another kind."""
        if event.kind != RUNTIME_CHANGED:
            return None
        changes = event.data.get("changes")
        if changes is None:
            found = _CHANGES.search(event.message)
            changes = _NEXT_CHANGE.split(found.group(1)) if found else []
        bitwise = event.data.get("bitwise")
        if bitwise is None and _KEEPS_BITWISE in event.message:
            bitwise = True
        elif bitwise is None and _LOSES_BITWISE in event.message:
            bitwise = False
        return cls(
            event.lease,
            event.step,
            tuple(changes),
            bitwise,
            refused=event.level == "error",
        )

    @property
    def words(self) -> str:
        """``"replicas 2 -> 4, distribution.mesh [2, 4] -> [4, 2]"``."""
        return ", ".join(self.changes) if self.changes else UNLISTED


def first_of(events: Sequence[RecordedEvent]) -> RuntimeChange | None:
    """The first runtime change among ``events`` (one session's), or None."""
    for event in events:
        change = RuntimeChange.of(event)
        if change is not None:
            return change
    return None


def newest(changes: Sequence[RuntimeChange | None]) -> RuntimeChange | None:
    """The newest change a session trained on after (refusals changed nothing)."""
    return max(_trained(changes), key=lambda c: c.lease, default=None)


def end_bitwise(changes: Sequence[RuntimeChange | None]) -> bool | None:
    """Whether the end can still equal an uninterrupted run's after all of
    ``changes``: False if one says not, None if one's verdict was lost."""
    verdicts = [c.bitwise for c in _trained(changes)]
    if False in verdicts:
        return False
    return None if None in verdicts else True


def _trained(changes: Sequence[RuntimeChange | None]) -> list[RuntimeChange]:
    return [c for c in changes if c is not None and not c.refused]


def status_line(changes: Sequence[RuntimeChange | None], holder: int) -> str | None:
    """``status``'s line: the newest of ``changes`` (the sessions read) and
    whether the end can still be bitwise after all of them; None where no
    session trained on another runtime.

    Args:
        changes: each session's change, or None.
        holder: the newest lease: a change of an older one names its session.
    """
    found = newest(changes)
    if found is None:
        return None
    since = f"since step {found.step}" if found.step is not None else "on resume"
    if found.lease != holder:
        since += f" (session {found.lease})"
    verdict = "can still" if end_bitwise(changes) else "may not"
    return f"runtime: changed {since} — {found.words}; the end {verdict} be bitwise"


def to_json(changes: Sequence[RuntimeChange | None]) -> dict[str, Any] | None:
    """``status --json``'s ``runtime_changed``: the newest change (its
    session, step and changes) and the end's verdict; None where none."""
    found = newest(changes)
    if found is None:
        return None
    return {
        "session": found.lease,
        "step": found.step,
        "changes": list(found.changes),
        "bitwise": end_bitwise(changes),
    }
