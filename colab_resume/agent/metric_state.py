"""Running metric state across a resume in the middle of an epoch.

Keras resets every metric at the start of each ``fit`` epoch — after any
restore. A run resumed mid-epoch would then average only the batches after
the resume, and callbacks that monitor those metrics (EarlyStopping,
ReduceLROnPlateau, ModelCheckpoint) would decide on different numbers. So
each checkpoint carries the metrics' variables as plain values, and the
resumed epoch puts them back right after Keras's reset, before its first
batch. (Metric variables are a few scalars per metric; JSON holds float32
and float64 values exactly.)
"""

from __future__ import annotations

from typing import Any


def _variables(model: Any) -> list[Any]:
    return [v for metric in model.metrics for v in metric.variables]


def capture(model: Any) -> list[list[Any]]:
    """``[path, dtype, values]`` of every metric variable of ``model``."""
    import numpy as np

    return [
        [str(v.path), str(v.dtype), np.asarray(v.numpy()).tolist()]
        for v in _variables(model)
    ]


def apply(model: Any, saved: list[list[Any]]) -> str | None:
    """Assign ``saved`` to ``model``'s metric variables.

    Returns:
        A warning if they do not fit (different metrics); nothing is assigned.
    """
    import numpy as np

    variables = _variables(model)
    if len(variables) != len(saved):
        return (
            f"the checkpoint holds {len(saved)} metric variables, the model has "
            f"{len(variables)}: this epoch's metrics restart from the resumed step"
        )
    values = []
    for variable, (_, dtype, value) in zip(variables, saved, strict=True):
        array = np.asarray(value, dtype=dtype)
        if tuple(array.shape) != tuple(variable.shape):
            return (
                f"metric variable {variable.path} has shape {tuple(variable.shape)}, "
                f"the checkpoint {array.shape}: this epoch's metrics restart from "
                f"the resumed step"
            )
        values.append(array)
    for variable, array in zip(variables, values, strict=True):
        variable.assign(array)
    return None
