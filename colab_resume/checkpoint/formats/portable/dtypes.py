"""Dtypes of the portable format: safetensors codes, NumPy names, integers.

``safetensors.numpy`` does not know bfloat16; ``ml_dtypes`` (which both JAX
and TensorFlow bring) does, so the codes are mapped here. Integer
variables are compared by kind, not width: the backends choose their
widths differently (see :data:`INTEGER`).
"""

from __future__ import annotations

from typing import Any

# safetensors dtype codes -> NumPy dtype names ("bfloat16" via ml_dtypes).
DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "U64": "uint64",
    "I32": "int32",
    "U32": "uint32",
    "I16": "int16",
    "U16": "uint16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}


def numpy_dtype(name: str) -> Any:
    import numpy as np

    name = name.removeprefix("<dtype: '").rstrip("'>")  # a tf.DType's str()
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def dtype_of_code(code: str) -> Any:
    return numpy_dtype(DTYPES[code])


# Integer dtypes the backends choose differently: JAX without x64 keeps an
# optimizer's iteration count in int32, TensorFlow in int64; a Dropout's
# SeedGenerator state is uint32 on JAX, int64 on TensorFlow. An integer
# variable therefore takes an integer tensor of any width and sign, as long
# as every value fits (checked on restore, see integer_misfit).
INTEGER = "integer"


def loose(structure: dict[str, Any]) -> dict[str, Any]:
    """``structure`` with every integer dtype alike (compared as such)."""
    return {
        group: [[n, s, INTEGER if is_integer(d) else d] for n, s, d in variables]
        if isinstance(variables, list)
        else variables
        for group, variables in structure.items()
    }


def is_integer(dtype_name: str) -> bool:
    try:
        return bool(numpy_dtype(dtype_name).kind in "iu")
    except TypeError:  # a dtype NumPy does not know is no integer of ours
        return False


def integer_misfit(value: Any, target: Any) -> str | None:
    """Why integer ``value`` cannot become ``target`` exactly, or None.

    Returns:
        None when both are integers and every value lies in ``target``'s
        range, else the values and the range, for the error message.
    """
    import numpy as np

    if value.dtype.kind not in "iu" or target.kind not in "iu":
        return f"{value.dtype} cannot become {target}"
    if value.size == 0:
        return None
    info = np.iinfo(target)
    # Python ints: NumPy compares uint64 with a negative bound wrongly.
    low, high = int(value.min()), int(value.max())
    if low >= int(info.min) and high <= int(info.max):
        return None
    return (
        f"it holds values from {low} to {high}, outside {target}'s range "
        f"[{int(info.min)}, {int(info.max)}]"
    )
