"""A run that finished before: its DONE record, and what a new call does with it.

A ``fit`` or ``run`` on a completed run trains nothing: it rebuilds the
model and restores the final state (``load_final_state``), unless it asks
for more steps than the finished run planned and reached, in which case
the run is extended (``reopen``) and trains on from its final state.
"""

from __future__ import annotations

from typing import Any

from colab_resume.agent import epoch_length
from colab_resume.agent.driver import Driver
from colab_resume.checkpoint import CheckpointManager, presets
from colab_resume.errors import CorruptRecordError, FencedError
from colab_resume.events import EventLog
from colab_resume.protocol import rundir
from colab_resume.protocol.listing import read_leases
from colab_resume.storage import Storage


def read_done(storage: Storage) -> dict[str, Any] | None:
    """DONE.json, or None while the run has not finished."""
    try:
        return storage.read_json(rundir.DONE_RECORD)
    except FileNotFoundError:
        return None
    except CorruptRecordError:
        return {}  # finished, with its plan unreadable: never extended


def asks_for_more(done: dict[str, Any], total_steps: int | None) -> bool:
    """True when a finished run that reached its planned end is asked to go on."""
    final = done.get("final_step")
    planned = done.get("planned_steps", final)  # older records: the final step
    return (
        isinstance(final, int)
        and isinstance(planned, int)
        and isinstance(total_steps, int)
        and final == planned
        and total_steps > planned
    )


def reopen(
    storage: Storage, events: EventLog, done: dict[str, Any], total_steps: int | None
) -> None:
    """A finished run asked for more steps: it is training again."""
    storage.delete(rundir.DONE_RECORD)
    events.emit(
        "run.extended",
        f"the run had completed at step {done.get('final_step')}; continuing "
        f"from its final state to step {total_steps}",
        step=done.get("final_step"),
    )


def load_final_state(
    storage: Storage,
    events: EventLog,
    driver: Driver,
    strategy: Any,
    done: dict[str, Any] | None = None,
) -> None:
    """The run finished before: rebuild and restore the final state."""
    with strategy.scope(), presets.watching() as loaded:
        driver.build()
    presets.mark(driver.state, loaded)
    reader = CheckpointManager(
        storage,
        lease=max([1] + [number for number, _ in read_leases(storage)]),
        fence=_never_write,
        events=events,
    )
    try:
        info = reader.restore(driver.state)
    finally:
        reader.close()
    epoch_length.check(info, driver.steps_per_epoch)
    driver.restored(info)
    events.emit(
        "run.already_completed", _completed_message(done or {}, driver.total_steps)
    )


def _completed_message(done: dict[str, Any], total_steps: int | None) -> str:
    final = done.get("final_step")
    planned = done.get("planned_steps", final)
    if isinstance(final, int) and isinstance(planned, int) and final < planned:
        return (
            f"the run had finished at step {final} of {planned} (a callback such "
            f"as EarlyStopping ended it); restored its final state"
        )
    if isinstance(final, int) and isinstance(total_steps, int) and total_steps < final:
        return (
            f"the run had completed at step {final}; asked for {total_steps} steps, "
            f"it cannot go back: restored its final state (step {final})"
        )
    return "the run had completed; restored its final state"


def _never_write() -> None:
    raise FencedError("this reader of a completed run never writes")
