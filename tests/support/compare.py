"""The one bitwise comparison of variable sets."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np

Arrays = Union[str, "os.PathLike[str]", Mapping[str, Any], Sequence[Any]]


def load(arrays: Arrays) -> dict[str, np.ndarray]:
    """Name -> array for an ``.npz`` path, a mapping, or a sequence (by index)."""
    if isinstance(arrays, (str, os.PathLike)):
        with np.load(arrays) as npz:
            return {key: npz[key] for key in npz.files}
    if isinstance(arrays, Mapping):
        return {str(k): _numpy(v) for k, v in arrays.items()}
    return {f"{i:04d}": _numpy(v) for i, v in enumerate(arrays)}


def _numpy(value: Any) -> np.ndarray:
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def assert_bitwise_equal(
    expected: Arrays,
    actual: Arrays,
    *,
    must_contain: Sequence[str] = (),
    where: str = "",
) -> None:
    """Same names, and per name the same dtype, shape and bytes.

    Stricter than ``np.array_equal``: ``-0.0`` differs from ``0.0`` and a NaN
    equals only the same NaN bit pattern, as "bitwise" means.

    Args:
        expected: the reference (an ``.npz`` path, name -> array, or a list).
        actual: the same kind of thing, to compare.
        must_contain: substrings each of which some name must contain, so a
            comparison cannot pass vacuously over the wrong variables.
        where: prefixed to a failure message (a seed, the kill step...).
    """
    a, b = load(expected), load(actual)
    assert a, "nothing to compare: the expected set is empty"
    assert sorted(a) == sorted(b), (
        f"different variables: only expected {sorted(set(a) - set(b))}, "
        f"only actual {sorted(set(b) - set(a))}"
    )
    for part in must_contain:
        assert any(part in name for name in a), f"no variable named like {part!r}"
    different = [
        name
        for name in sorted(a)
        if a[name].dtype != b[name].dtype
        or a[name].shape != b[name].shape
        or a[name].tobytes() != b[name].tobytes()
    ]
    assert not different, f"{where} variables differ: {different}".lstrip()
