"""Checking option values, in one place and one wording.

Every option class (``AgentOptions``, ``SessionOptions``, ``ConnectOptions``,
``TriggerOptions``, ``RetryPolicy``...) validates its fields up front with
these, so a bad value always reads the same way: the field, what it must
be, the value given, and where there is one, the fix —
``keep must be an int >= 1, got 0.``
"""

from __future__ import annotations

import math
from typing import Any


def _fail(error: type[Exception], name: str, need: str, value: Any, hint: str) -> None:
    tail = f" {hint}" if hint else ""
    raise error(f"{name} must be {need}, got {value!r}.{tail}")


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int = 1,
    optional: bool = False,
    error: type[Exception] = ValueError,
    hint: str = "",
) -> None:
    """``value`` is an int (not a bool) of at least ``minimum``, or None if optional.

    Raises:
        ``error``: it is not; the message names ``name`` and the value.
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        need = f"an int >= {minimum}" + (" or None" if optional else "")
        _fail(error, name, need, value, hint)


def check_seconds(
    name: str,
    value: Any,
    *,
    optional: bool = False,
    error: type[Exception] = ValueError,
    hint: str = "",
) -> None:
    """``value`` is a finite number of seconds > 0, or None if optional.

    Raises:
        ``error``: it is not; the message names ``name`` and the value.
    """
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        need = "a number of seconds > 0" + (" or None" if optional else "")
        _fail(error, name, need, value, hint)


def check_bool(
    name: str, value: Any, *, error: type[Exception] = ValueError, hint: str = ""
) -> None:
    """``value`` is True or False (not 1, not "yes").

    Raises:
        ``error``: it is not.
    """
    if not isinstance(value, bool):
        _fail(error, name, "True or False", value, hint)
