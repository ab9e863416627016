"""How tests compare two runs: state bitwise, reported numbers to 2 ulp.

State (weights, optimizer slots) is compared bitwise
(:func:`assert_bitwise_equal`). Reported numbers — History, the values in a
CSV log — may differ by at most 2 ulp of float32
(:func:`assert_same_history`, :func:`assert_same_files`): TensorFlow's CPU
kernels sometimes round a scalar reduction differently in its last bit in
the first step of a resumed process, without any effect on the gradients
(measured: 1 ulp in a VAE's epoch loss between runs whose weights were
bitwise equal).
"""

from __future__ import annotations

import csv
import io
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


def assert_same_reported(actual: list, expected: list, where: str) -> None:
    """Reported numbers: equal up to 2 ulp of float32 (see the module docstring)."""
    assert len(actual) == len(expected), where
    try:
        np.testing.assert_array_max_ulp(
            np.asarray(actual, dtype="float32"),
            np.asarray(expected, dtype="float32"),
            maxulp=2,
        )
    except AssertionError as exc:
        raise AssertionError(f"{where}: {exc}\n{actual}\n{expected}") from None


def assert_same_history(actual: dict, expected: dict, where: str) -> None:
    assert actual["epoch"] == expected["epoch"], where  # when it stopped, too
    assert sorted(actual["history"]) == sorted(expected["history"]), where
    for key, values in expected["history"].items():
        assert_same_reported(actual["history"][key], values, f"{where} {key}")


def assert_same_files(actual: dict, expected: dict, where: str) -> None:
    assert sorted(actual) == sorted(expected), where
    for name, content in expected.items():
        if not name.endswith(".csv") or content is None:
            assert actual[name] == content, f"{where} {name}"
            continue
        mine = list(csv.reader(io.StringIO(actual[name])))
        theirs = list(csv.reader(io.StringIO(content)))
        assert [r[0] for r in mine] == [r[0] for r in theirs], f"{where} {name}"
        assert mine[0] == theirs[0], f"{where} {name} header"
        for row, other in zip(mine[1:], theirs[1:], strict=True):
            assert len(row) == len(other), f"{where} {name}"
            numbers = [(a, b) for a, b in zip(row, other, strict=True) if _number(b)]
            assert [a for a, b in zip(row, other, strict=True) if not _number(b)] == [
                b for b in other if not _number(b)
            ], f"{where} {name}"  # "NA" and the like, as written
            assert_same_reported(
                [float(a) for a, _ in numbers], [float(b) for _, b in numbers], where
            )


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
