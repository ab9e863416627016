"""What runtime wrote a checkpoint, and what changed when another one reads it.

Colab's reality: the TPU quota ends, the run continues on a GPU runtime, and
tomorrow goes back to the TPU. Each checkpoint records the backend, the
accelerator, the replica count and the precision policy in its extras; a
restore under other ones continues from the committed step with the data
position and all state, and says in one event what changed. Bitwise
equality with an uninterrupted run is promised only when none of these
changed: another backend or replica count reduces in another order, and
another precision computes other numbers. A multi-process run (JAX, one
process per host) records its process count too: a checkpoint written by a
2-host slice continues on one host (or 4) from its committed step, the
replicated state read whole by whoever reads it, and the event names the
change.
"""

from __future__ import annotations

from typing import Any

from colab_resume import backend
from colab_resume.backend import jax_distributed
from colab_resume.events import EventLog

KEY = "runtime"  # in a checkpoint's extras
COMPARED = ("backend", "processes", "replicas", "precision", "kind")


def facts(connection: Any) -> dict[str, Any]:
    """This session's runtime, as a checkpoint records it."""
    found: dict[str, Any] = {
        "backend": backend.name(),
        "processes": jax_distributed.process_count(),
    }
    if connection is not None:
        found.update(
            kind=connection.kind,
            chip=connection.chip_type,
            replicas=connection.replicas,
            precision=connection.precision,
        )
    return found


def label(runtime: dict[str, Any]) -> str:
    """E.g. ``"JAX on TPU x1 (mixed_bfloat16)"``."""
    name = {"jax": "JAX", "tensorflow": "TensorFlow"}.get(
        str(runtime.get("backend")), str(runtime.get("backend"))
    )
    kind = str(runtime.get("kind", "?")).upper()
    processes = runtime.get("processes", 1)
    hosts = f" over {processes} processes" if processes != 1 else ""
    return (
        f"{name} on {kind} x{runtime.get('replicas', '?')}{hosts} "
        f"({runtime.get('precision', '?')})"
    )


def changes(saved: Any, now: dict[str, Any]) -> list[str]:
    """What differs between the checkpoint's runtime and this one, in words."""
    if not isinstance(saved, dict):
        return []  # written by a version that did not record it
    return [
        f"{field} {saved.get(field)} -> {now.get(field)}"
        for field in COMPARED
        if field in saved and field in now and saved[field] != now[field]
    ]


def announce(
    events: EventLog,
    saved: Any,
    now: dict[str, Any],
    *,
    step: int,
    skipped_groups: tuple[str, ...] = (),
) -> list[str]:
    """Emit ``run.runtime_changed`` when the runtime changed; return the changes."""
    changed = changes(saved, now)
    if not changed:
        return []
    notes = ""
    scale = [g for g in skipped_groups if g.startswith("loss_scale")]
    if scale:
        notes = (
            " The checkpoint's loss scale (LossScaleOptimizer, mixed_float16) "
            "was not needed and is dropped."
            if now.get("precision") != "mixed_float16"
            else " The loss scale starts afresh (LossScaleOptimizer, "
            "mixed_float16): the checkpoint had none."
        )
    events.emit(
        "run.runtime_changed",
        f"continuing on {label(now)} from a checkpoint written on "
        f"{label(saved)} ({', '.join(changed)}). Training resumes at step "
        f"{step} with the data position and all state; bitwise equality with "
        f"an uninterrupted run holds only for the same backend, process and "
        f"replica count, and precision.{notes}",
        level="warning",
        step=step,
        changes=changed,
        saved=saved,
        now=now,
    )
    return changed
