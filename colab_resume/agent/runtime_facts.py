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

import importlib.metadata
import os
import platform
from typing import Any

from colab_resume import backend
from colab_resume.backend import jax_distributed
from colab_resume.errors import ColabResumeError
from colab_resume.events import EventLog

KEY = "runtime"  # in a checkpoint's extras
COMPARED = (
    "backend",
    "processes",
    "replicas",
    "precision",
    "kind",
    "chip",
    "distribution",
    "versions",
)
# The libraries whose version can change a step's numbers, as pip names them
# (the first installed of each group; the TensorFlow builds have three names).
LIBRARIES = (
    ("keras",),
    ("jax",),
    ("jaxlib",),
    ("tensorflow", "tensorflow-cpu", "tensorflow-tpu"),
    ("keras-hub",),
    ("grain",),
    ("numpy",),
)


class RuntimeChangedError(ColabResumeError, RuntimeError):
    """``on_runtime_change="refuse"``: the checkpoint was written under
    another runtime (the message lists what changed)."""


def facts(connection: Any, strategy: Any = None, model: Any = None) -> dict[str, Any]:
    """This session's runtime, as a checkpoint records it.

    Args:
        connection: what the accelerator connected (None before).
        strategy: the ``tf.distribute`` strategy or ``keras.distribution``
            trained under, for its description (None: the backend's global).
        model: the model built, for the layout of each sharded variable.
    """
    found: dict[str, Any] = {
        "backend": backend.name(),
        "processes": jax_distributed.process_count(),
        "versions": versions(),
    }
    if connection is not None:
        found.update(
            kind=connection.kind,
            chip=connection.chip_type,
            replicas=connection.replicas,
            precision=connection.precision,
            distribution=backend.current().describe_distribution(strategy, model),
        )
    return found


def versions() -> dict[str, str]:
    """Python's, the installed libraries' and Colab's runtime version."""
    found = {"python": platform.python_version()}
    for names in LIBRARIES:
        for name in names:
            try:
                found[names[0]] = importlib.metadata.version(name)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    colab = os.environ.get("COLAB_RELEASE_TAG")
    if colab:
        found["colab"] = colab[:200]
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
    """What differs between the checkpoint's runtime and this one, in words.

    A mapping (the distribution, the versions) is compared key by key, so
    that the words name what changed: ``"versions.keras 3.13.2 -> 3.15.1"``.
    """
    if not isinstance(saved, dict):
        return []  # written by a version that did not record it
    found: list[str] = []
    for field in COMPARED:
        if field not in saved or field not in now or saved[field] == now[field]:
            continue
        old, new = saved[field], now[field]
        if isinstance(old, dict) and isinstance(new, dict):
            found += [
                f"{field}.{key} {_short(old.get(key))} -> {_short(new.get(key))}"
                for key in sorted(set(old) | set(new), key=str)
                if old.get(key) != new.get(key)
            ]
        else:
            found.append(f"{field} {_short(old)} -> {_short(new)}")
    return found


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 120 else text[:117] + "..."


def announce(
    events: EventLog,
    saved: Any,
    now: dict[str, Any],
    *,
    step: int,
    skipped_groups: tuple[str, ...] = (),
    refuse: bool = False,
) -> list[str]:
    """Emit ``run.runtime_changed`` when the runtime changed; return the changes.

    Raises:
        RuntimeChangedError: ``refuse`` and something changed (after the event).
    """
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
        f"{label(saved)} ({', '.join(changed)}). "
        + (
            "Refused (on_runtime_change='refuse'): nothing was trained. "
            if refuse
            else f"Training resumes at step {step} with the data position and "
            f"all state. "
        )
        + f"{bitwise(changed)}{notes}",
        level="error" if refuse else "warning",
        step=step,
        changes=changed,
        bitwise=keeps_bitwise(changed),
        saved=saved,
        now=now,
    )
    if refuse:
        raise RuntimeChangedError(
            f"The checkpoint at step {step} was written on {label(saved)}; this "
            f"session runs {label(now)}. What changed: {'; '.join(changed)}. "
            f"{bitwise(changed)} Resume on the runtime it was written on, or "
            f"create the Agent with on_runtime_change='continue' to train on."
        )
    return changed


def keeps_bitwise(changed: list[str]) -> bool:
    """Whether the end can still equal an uninterrupted run's: only Colab's
    runtime tag changed, nothing that computes a step."""
    return all(change.startswith("versions.colab ") for change in changed)


def bitwise(changed: list[str]) -> str:
    """Whether the end can still equal an uninterrupted run's, in words."""
    if keeps_bitwise(changed):
        return (
            "Bitwise equality with an uninterrupted run still holds: nothing "
            "that computes a step changed."
        )
    return (
        "No bitwise equality with an uninterrupted run: another backend, "
        "device count, distribution or layout reduces in another order, and "
        "another precision or library version computes other numbers."
    )
