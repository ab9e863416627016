"""The agent's own entries in a checkpoint's extras, and their types.

A manifest's ``extras`` carry the agent's state beside the user's: the
Keras history, the data fingerprints, each callback's state, the metrics'
running values, the Grain pipeline's position, the epoch length and the
runtime. Whoever can write the run directory can write a manifest, so
each entry the agent reads back is checked here, when the manifest is
parsed, against the types the agent writes. An entry of the wrong shape
makes the checkpoint damaged: restore falls back to the next older one
and names it, and the callback, metric and data code never receives a
value it did not write (before, a ``callbacks`` entry of the wrong shape
restored as valid and the run then died on a raw ``TypeError``).

A field inside an entry that the agent does not know is a newer writer's
and is left alone; a field it knows, of the wrong type, is damage. A
callback's state written through its own ``get_resume_state`` is the
user's value: only its being an object is checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from colab_resume.parsing import short

# Who kept a callback's state (its record's ``kept_by``): the callback's
# own protocol, or the agent's handler for a Keras built-in, by name.
PROTOCOL = "protocol"
DTYPES = frozenset(
    {"bool", "float16", "bfloat16", "float32", "float64"}
    | {f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)}
)

Rule = Callable[[Any], bool]


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return _int(value) and value >= 0


def _positive_or_none(value: Any) -> bool:
    return value is None or (_int(value) and value >= 1)


def _text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _best(value: Any) -> bool:
    """A monitored best as the callback handlers write it: a finite number,
    a non-finite one spelt as ``repr`` gives it, or None."""
    if value is None or _int(value):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return value in ("inf", "-inf", "nan")


# The state each Keras built-in's handler writes (agent/callback_state.py).
BUILTIN_STATES: dict[str, dict[str, Rule]] = {
    "EarlyStopping": {
        "wait": _int,
        "stopped_epoch": _int,
        "best": _best,
        "best_epoch": _int,
        "has_best_weights": lambda v: isinstance(v, bool),
    },
    "ReduceLROnPlateau": {"wait": _int, "best": _best, "cooldown_counter": _int},
    "ModelCheckpoint": {
        "best": _best,
        "last_batch_seen": lambda v: v is None or _int(v),
        "batches_since_save": _int,
        "current_epoch": _int,
    },
    "CSVLogger": {
        "size": _count,
        "keys": lambda v: (
            v is None or (isinstance(v, list) and all(isinstance(k, str) for k in v))
        ),
    },
    "TensorBoard": {"train_batch": _int, "test_batch": _int},
}
# Optional fields: checked when present.
OPTIONAL_STATES: dict[str, dict[str, Rule]] = {
    "CSVLogger": {"content": lambda v: isinstance(v, str)},
}


def callback_entry_problem(entry: Any) -> str | None:
    """What is wrong with one callback's record, None if nothing."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        return "is not an object or null"
    name, state = entry.get("class"), entry.get("state")
    kept_by = entry.get("kept_by")
    if not isinstance(name, str) or not isinstance(state, dict):
        return "needs 'class' (a string) and 'state' (an object)"
    if kept_by is not None and not isinstance(kept_by, str):
        return "has a 'kept_by' that is not a string"
    # Records of older versions name no keeper: a built-in's class name is
    # then its handler's.
    handler = kept_by if kept_by is not None else name
    required = BUILTIN_STATES.get(handler)
    if required is None:
        return None  # the callback's own protocol: the user's value
    for field, rule in required.items():
        if field not in state or not rule(state[field]):
            return f"({handler}) has {field}={short(state.get(field))}"
    for field, rule in OPTIONAL_STATES.get(handler, {}).items():
        if field in state and not rule(state[field]):
            return f"({handler}) has {field}={short(state[field])}"
    return None


def _callbacks(value: Any) -> str | None:
    if not isinstance(value, list):
        return "must be a list of callback records (one per callback, or null)"
    for index, entry in enumerate(value):
        problem = callback_entry_problem(entry)
        if problem:
            return f"callback #{index} {problem}"
    return None


def _shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a nested list of numbers, None if ragged or not numbers."""
    if isinstance(value, (bool, int, float)):
        return ()
    if not isinstance(value, list):
        return None
    shapes = {_shape(item) for item in value}
    if len(shapes) > 1 or None in shapes:
        return None
    inner = shapes.pop() if shapes else ()
    return None if inner is None else (len(value), *inner)


def _metric_state(value: Any) -> str | None:
    if not isinstance(value, list):
        return "must be a list of [path, dtype, values]"
    for index, item in enumerate(value):
        ok = (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and item[1] in DTYPES
            and _shape(item[2]) is not None
        )
        if not ok:
            return (
                f"variable #{index} is {short(item)}, not [path, dtype (one of "
                f"{', '.join(sorted(DTYPES))}), a number or a rectangular list "
                f"of numbers]"
            )
    return None


def _grain_part(part: Any) -> bool:
    if not isinstance(part, dict) or not _text_or_none(part.get("pipeline")):
        return False
    state = part.get("state")
    if isinstance(state, dict) and set(state) == {"bytes"}:
        return isinstance(state["bytes"], str)
    return True


def _grain(value: Any) -> str | None:
    if not (
        isinstance(value, dict)
        and _count(value.get("epoch"))
        and _count(value.get("batch"))
    ):
        return "must hold 'epoch' and 'batch' (counts)"
    parts = value.get("processes", [value])
    if not (isinstance(parts, list) and parts and all(map(_grain_part, parts))):
        return (
            "must hold each process's {'pipeline': text, 'state': ...} "
            "('bytes' of a state as text)"
        )
    return None


_RUNTIME: dict[str, Rule] = {
    "backend": lambda v: isinstance(v, str),
    "processes": _positive_or_none,
    "replicas": _positive_or_none,
    "kind": _text_or_none,
    "chip": _text_or_none,
    "precision": _text_or_none,
}


def _runtime(value: Any) -> str | None:
    if not isinstance(value, dict):
        return "must be an object"
    for field, rule in _RUNTIME.items():
        if field in value and not rule(value[field]):
            return f"has {field}={short(value[field])}"
    return None


def _fingerprints(value: Any) -> str | None:
    if isinstance(value, dict) and all(
        isinstance(k, str) and k.isdigit() and isinstance(v, str)
        for k, v in value.items()
    ):
        return None
    return "must map epoch numbers (strings) to strings"


def _history(value: Any) -> str | None:
    epochs = value.get("epoch", []) if isinstance(value, dict) else None
    curves = value.get("history", {}) if isinstance(value, dict) else None
    if (
        isinstance(epochs, list)
        and all(map(_int, epochs))
        and isinstance(curves, dict)
        and all(
            isinstance(k, str) and isinstance(v, list) and all(map(_is_scalar, v))
            for k, v in curves.items()
        )
    ):
        return None
    return "must be {'epoch': [int, ...], 'history': {name: [number, ...]}}"


def _position(value: Any) -> str | None:
    """The proof a resume checks its data position by (agent/trail.py)."""
    if isinstance(value, dict) and (
        not value
        or (
            set(value) == {"epoch", "batch", "fingerprint"}
            and _int(value["epoch"])
            and _int(value["batch"])
            and isinstance(value["fingerprint"], str)
        )
    ):
        return None
    return "must be {'epoch': int, 'batch': int, 'fingerprint': str}"


def _is_scalar(value: Any) -> bool:
    return value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool)
    )


def _one_of(rule: Rule, what: str) -> Callable[[Any], str | None]:
    return lambda value: None if rule(value) else what


# Every entry the agent reads back, by key, and the rule it must keep.
ENTRIES: dict[str, Callable[[Any], str | None]] = {
    "fingerprints": _fingerprints,
    "global_batch": _one_of(_positive_or_none, "must be a count >= 1 or null"),
    "history": _history,
    "callbacks": _callbacks,
    "metric_state": _metric_state,
    "grain": _grain,
    "steps_per_epoch": _one_of(_positive_or_none, "must be a count >= 1 or null"),
    "runtime": _runtime,
    "position": _position,
}


def check(extras: dict[str, Any]) -> None:
    """Check every agent entry of ``extras`` against the agent's types.

    Raises:
        ValueError: an entry has the wrong shape; the message names the
            entry, what is wrong and the value.
    """
    for key, rule in ENTRIES.items():
        if key not in extras:
            continue
        problem = rule(extras[key])
        if problem:
            raise ValueError(
                f"Manifest.extras[{key!r}] {problem}; got {short(extras[key])}. "
                f"The agent wrote no such value: the checkpoint is not used."
            )
