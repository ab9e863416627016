"""How the example tests compare what a user sees of two runs.

State (weights, optimizer slots) is compared bitwise by the tests
themselves. Reported numbers — History, the values in a CSV log — may
differ by at most 2 ulp of float32: TensorFlow's CPU kernels sometimes
round a scalar reduction differently in its last bit in the first step of
a resumed process, without any effect on the gradients (measured: 1 ulp in
a VAE's epoch loss between runs whose weights were bitwise equal).
"""

from __future__ import annotations

import csv
import io

import numpy as np


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
