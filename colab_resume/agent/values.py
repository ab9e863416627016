"""Small checks and conversions shared by the agent's drivers."""

from __future__ import annotations

import sys
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
    """Raise TypeError naming ``name`` unless ``value`` is a function to call.

    A Keras model or layer is callable too, but calling it with no input
    fails deep inside Keras: it is named as the function's result instead.
    """
    keras = sys.modules.get("keras")  # a Keras object means Keras is imported
    if keras is not None and isinstance(value, keras.Layer):
        raise TypeError(
            f"{name} must be the function that builds the model, not a "
            f"{type(value).__name__} already built: pass {name}, not {name}() "
            f"(the agent calls it inside the accelerator's strategy scope, and "
            f"again after every restart)."
        )
    if not callable(value):
        raise TypeError(
            f"{name} must be a function (called again at every restart), got "
            f"{type(value).__name__}."
        )
