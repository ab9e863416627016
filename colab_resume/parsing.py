"""The one parser for untrusted JSON records read from a run directory.

It sits on the lowest floor (docs/DESIGN.md §3), below the protocol's
schemas (:mod:`colab_resume.protocol.records` checks each field with
:func:`number` and :func:`text`) and below the storage layer
(:meth:`~colab_resume.storage.Storage.read_json` decodes every record with
:func:`decode`), and imports nothing of either.

Anything in a run directory may have been written by a collaborator, a
compromised notebook or plain corruption. Python's ``json`` module alone
turns such input into crashes far from the read: deep nesting raises
``RecursionError``, an integer of more than 4,300 digits ``ValueError``,
and a huge integer in a float field ``OverflowError`` at the first
``float()``. :func:`decode` bounds all of it up front — size, nesting
depth, number magnitude — and raises one error,
:class:`~colab_resume.errors.CorruptRecordError`, naming the object.

:func:`number` is the one check for a numeric field's range: finite, and
within bounds that say what the protocol allows (timings of at most a
day, timestamps before year 3000...). :func:`text` is the one cap on a
string field's length.
"""

from __future__ import annotations

import json
import math
from typing import Any

from colab_resume.errors import CorruptRecordError

# Records we read back are small; anything bigger is damage or hostility.
MAX_RECORD_BYTES = 1 << 20
# Our deepest record (a manifest's structure or extras) nests a handful of
# levels; user extras get room to spare.
MAX_DEPTH = 64
# Steps, leases, sizes and beats fit in 64 bits; a longer integer is not ours.
MAX_INT_DIGITS = 19
MAX_INT = 2**63 - 1

# Host names, session ids and accelerators are short; an error is one
# exception's message. Longer text is cut, not refused: a holder that
# failed with a long message must still read as FAILED.
MAX_TEXT_CHARS = 4096
TRUNCATED = "... [cut: {} more characters]"

# Ranges of protocol fields, in seconds.
DAY = 86_400.0
YEAR = 365.25 * DAY
# Wall-clock timestamps: after 1970, before the year 3000.
MAX_TIMESTAMP = 32_503_680_000.0


def decode(data: bytes, where: str) -> dict[str, Any]:
    """Parse one untrusted JSON object record, bounded in size, depth and numbers.

    ``NaN`` and ``Infinity`` are accepted (metrics may be NaN); a float
    literal too large for a float, or an integer beyond 64 bits, is not.

    Args:
        data: the record's bytes, at most :data:`MAX_RECORD_BYTES`.
        where: the object's URL, for messages.

    Raises:
        CorruptRecordError: too big, not JSON, nested too deep, a number out
            of range, or not a JSON object.
    """
    if len(data) > MAX_RECORD_BYTES:
        raise _damaged(where, f"it is larger than {MAX_RECORD_BYTES} bytes")
    try:
        value = json.loads(
            data.decode("utf-8"), parse_int=_parse_int, parse_float=_parse_float
        )
    except _NumberOutOfRange as exc:
        raise _damaged(where, str(exc)) from None
    except RecursionError:
        raise _damaged(where, f"it nests deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _damaged(where, f"it is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise _damaged(
            where, f"it holds a JSON {type(value).__name__}, expected an object"
        )
    if _depth(value) > MAX_DEPTH:
        raise _damaged(where, f"it nests deeper than {MAX_DEPTH} levels")
    return value


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite JSON number (bools are not numbers)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def number(
    value: Any,
    where: str,
    field: str,
    *,
    low: float,
    high: float,
    integer: bool = False,
) -> float | int:
    """``value`` checked as a finite number in ``[low, high]``.

    Args:
        value: a decoded JSON value.
        where: the object's URL, for messages.
        field: the field's name, for messages.
        low: smallest allowed value.
        high: largest allowed value.
        integer: require an int (bools never count as numbers).

    Raises:
        CorruptRecordError: not a number, not finite, or out of range.
    """
    kinds = (int,) if integer else (int, float)
    if not isinstance(value, kinds) or isinstance(value, bool):
        need = "an integer" if integer else "a number"
        raise CorruptRecordError(
            f"{where}: field {field!r} is {type(value).__name__} {short(value)}, "
            f"expected {need}. The record is damaged; delete it or upgrade "
            f"colab_resume."
        )
    if not (low <= value <= high):  # False for NaN too
        raise CorruptRecordError(
            f"{where}: field {field!r} is {short(value)}, outside [{low:g}, "
            f"{high:g}]; no colab_resume writes that. The record is damaged or "
            f"hostile; delete it."
        )
    return value


def text(value: str) -> str:
    """``value`` cut to :data:`MAX_TEXT_CHARS` characters, marked when cut."""
    if len(value) <= MAX_TEXT_CHARS:
        return value
    return value[:MAX_TEXT_CHARS] + TRUNCATED.format(len(value) - MAX_TEXT_CHARS)


def short(value: Any) -> str:
    """``repr(value)`` cut to a length fit for one line of a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _NumberOutOfRange(ValueError):
    pass


def _parse_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > MAX_INT_DIGITS or int(text) > MAX_INT or int(text) < -MAX_INT:
        raise _NumberOutOfRange(f"it holds an integer of {len(digits)} digits")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # a literal such as 1e400: not written by json
        raise _NumberOutOfRange(
            f"it holds a number too large for a float ({text[:20]})"
        )
    return value


def _depth(value: Any) -> int:
    """Nesting depth of a decoded value, without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                return depth
            stack.extend(
                (child, depth + 1) for child in item if isinstance(child, (dict, list))
            )
    return deepest


def _damaged(where: str, why: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"{where} is not a record colab_resume wrote: {why}. It was damaged or "
        f"written by something else. Delete or move it to let the run continue."
    )
