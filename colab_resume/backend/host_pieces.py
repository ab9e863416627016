"""A sharded array as the host holds it: the pieces, not the whole.

A variable sharded over devices (``keras.distribution.ModelParallel`` on
JAX) is read to the host one shard at a time, each distinct shard once
(the device holding replica 0 of it): the host then holds exactly the
array's bytes, never a gathered copy beside them, and a process of a
multi-process run holds only the shards its devices have. A restore puts
each device's region back from whichever pieces cover it, so the pieces a
(2, 4) mesh wrote fill a (4, 2) mesh, one device, or TensorFlow's whole
variable alike.

Pure NumPy: both backends and the portable format use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

Starts = tuple[int, ...]


@dataclasses.dataclass
class HostPieces:
    """Pieces of one array of ``shape``, each at its ``starts`` offsets.

    Attributes:
        shape: the whole array's shape.
        pieces: ``(starts, host array)``, disjoint.
    """

    shape: tuple[int, ...]
    pieces: list[tuple[Starts, Any]]

    @property
    def dtype(self) -> Any:
        return self.pieces[0][1].dtype

    @property
    def nbytes(self) -> int:
        return sum(int(array.nbytes) for _, array in self.pieces)

    def region(self, index: Sequence[slice]) -> Any:
        """The values of ``index`` (one slice per axis, step 1) as an array.

        A piece that is exactly the region is returned as it is (a restore
        on the mesh that wrote it copies nothing here); otherwise the
        region is filled from every piece that overlaps it.
        """
        import numpy as np

        bounds = _bounds(index, self.shape)
        for starts, array in self.pieces:
            if all(
                lo == s and hi == s + n
                for (lo, hi), s, n in zip(bounds, starts, array.shape, strict=True)
            ):
                return array
        out = np.empty([hi - lo for lo, hi in bounds], dtype=self.dtype)
        for starts, array in self.pieces:
            overlap = [
                (max(lo, s), min(hi, s + n))
                for (lo, hi), s, n in zip(bounds, starts, array.shape, strict=True)
            ]
            if any(a >= b for a, b in overlap):
                continue
            into = tuple(
                slice(a - lo, b - lo)
                for (a, b), (lo, _) in zip(overlap, bounds, strict=True)
            )
            take = tuple(
                slice(a - s, b - s) for (a, b), s in zip(overlap, starts, strict=True)
            )
            out[into] = array[take]
        return out

    def whole(self) -> Any:
        """The whole array (a copy, unless one piece is all of it).

        Raises:
            ValueError: the pieces are not all of it (a process of a
                multi-process run holds only its own devices' shards).
        """
        held, expected = self._held()
        if held != expected:
            raise ValueError(
                f"this process holds {held} of the {expected} elements of an array "
                f"of shape {list(self.shape)}; the others are on other processes' "
                f"devices"
            )
        return self.region([slice(0, n) for n in self.shape])

    def gaps(self) -> str | None:
        """What is wrong with the pieces as a cover of the array, or None:
        a piece outside its bounds, two that overlap, or elements no piece
        holds."""
        boxes: list[list[tuple[int, int]]] = []
        for starts, array in self.pieces:
            if len(starts) != len(self.shape) or array.ndim != len(self.shape):
                return f"a piece at {list(starts)} has {array.ndim} axes"
            box = [(s, s + n) for s, n in zip(starts, array.shape, strict=True)]
            within = zip(box, self.shape, strict=True)
            if any(lo < 0 or hi > n for (lo, hi), n in within):
                return f"a piece {_show(box)} lies outside {list(self.shape)}"
            for other in boxes:
                both = zip(box, other, strict=True)
                if all(a < d and c < b for (a, b), (c, d) in both):
                    return f"pieces {_show(box)} and {_show(other)} overlap"
            boxes.append(box)
        held, expected = self._held()
        if held != expected:
            return f"the pieces hold {held} of {expected} elements"
        return None

    def _held(self) -> tuple[int, int]:
        """Elements the pieces hold, and elements the array has."""
        expected = 1
        for n in self.shape:
            expected *= n
        return sum(int(array.size) for _, array in self.pieces), expected


def _bounds(index: Sequence[slice], shape: Sequence[int]) -> list[tuple[int, int]]:
    bounds = []
    for axis, n in zip(index, shape, strict=True):
        lo, hi, step = axis.indices(n)
        if step != 1:
            raise ValueError(f"a region's slices have step 1, not {step}")
        bounds.append((lo, hi))
    return bounds


def _show(box: list[tuple[int, int]]) -> str:
    return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"
