"""Checking option values, in one place and one wording.

Every option class (``AgentOptions``, ``SessionOptions``, ``ConnectOptions``,
``TriggerOptions``, ``RetryPolicy``...) validates its fields up front with
these, so a bad value always reads the same way: the field, what it must
be, the value given, and where there is one, the fix —
``keep must be an int >= 1, got 0.``
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Problem:
    """What was wrong with one field, kept on the error it raised.

    Attributes:
        field: the attribute, without its class (``every_steps``).
        need: what it must be (``an int >= 1 or None``).
        value: the value given.
        hint: the fix, or "".
    """

    field: str
    need: str
    value: Any
    hint: str

    def message(self, name: str) -> str:
        """The error message, naming the field ``name``."""
        tail = f" {self.hint}" if self.hint else ""
        return f"{name} must be {self.need}, got {self.value!r}.{tail}"


def _fail(error: type[Exception], name: str, need: str, value: Any, hint: str) -> None:
    problem = Problem(name.rpartition(".")[2], need, value, hint)
    exc = error(problem.message(name))
    exc.problem = problem  # type: ignore[attr-defined]
    raise exc


def build(make: Callable[..., T], names: Mapping[str, str], /, **values: Any) -> T:
    """``make(**values)``, a bad value's error naming it as the caller spelled it.

    An option class names its fields as its own (``TriggerOptions.every_steps``);
    a caller that offers them under other names (the Agent's flat
    ``save_every_steps``) builds it through this, so the check stays in the
    class that owns the field and the message names what the user typed.

    Args:
        make: the option class (or any callable that validates with these
            checks).
        names: field of ``make`` -> the name the caller knows it by.
        **values: passed to ``make``.

    Returns:
        What ``make`` returned.

    Raises:
        Exception: what ``make`` raised, of the same type; when it came from
            one of these checks on a field in ``names``, the message names
            ``names[field]`` instead.
    """
    try:
        return make(**values)
    except Exception as exc:
        problem = getattr(exc, "problem", None)
        if not isinstance(problem, Problem) or problem.field not in names:
            raise
        renamed = type(exc)(problem.message(names[problem.field]))
        renamed.problem = problem  # type: ignore[attr-defined]
        raise renamed from None


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
