"""Small checks and conversions shared by the agent's drivers."""

from __future__ import annotations

from typing import Any


def scalars(values: dict[Any, Any]) -> dict[str, float]:
    """The entries that convert to a Python float (metrics for manifests, history).

    Tensors, numpy scalars and numbers convert; anything else is left out.
    """
    out = {}
    for key, value in values.items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def check_callable(name: str, value: Any) -> None:
    """Raise TypeError naming ``name`` unless ``value`` can be called."""
    if not callable(value):
        raise TypeError(
            f"{name} must be a function (called again at every restart), got "
            f"{type(value).__name__}."
        )
