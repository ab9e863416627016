"""A sharded variable's pieces: any region, damage named, TensorFlow reads them.

The pieces here are cut as a JAX run on a (2, 4) mesh writes them (the real
JAX save and restore, on 8 CPU devices, are in
``tests/on_jax/test_sharded_state.py``): each region a reading layout asks
for is exactly that part of the array, whatever the pieces' cut; pieces
that overlap, leave a gap or lie outside the array are refused by name
before anything is assigned; and a TensorFlow model reads a checkpoint
whose kernel is stored in pieces, bitwise.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

from colab_resume.backend.host_pieces import HostPieces
from colab_resume.checkpoint.errors import DamagedCheckpointError
from colab_resume.checkpoint.formats.portable import (
    ArrayState,
    read_arrays,
    write_arrays,
)
from colab_resume.checkpoint.formats.portable.pieces import join, piece_name


def cut(array: np.ndarray, parts: tuple[int, ...]) -> HostPieces:
    """``array`` split evenly into ``parts`` along each axis."""
    pieces = []
    for index in np.ndindex(*parts):
        size = [n // p for n, p in zip(array.shape, parts, strict=True)]
        starts = tuple(i * s for i, s in zip(index, size, strict=True))
        region = tuple(slice(s, s + n) for s, n in zip(starts, size, strict=True))
        pieces.append((starts, array[region].copy()))
    return HostPieces(shape=array.shape, pieces=pieces)


@pytest.mark.parametrize("parts", [(1, 4), (2, 2), (4, 1), (1, 1)])
@pytest.mark.parametrize("asked", [(4, 1), (1, 2), (2, 4), (1, 1), (8, 8)])
def test_any_region_is_that_part_of_the_array(parts, asked) -> None:
    array = np.arange(16 * 24, dtype="float32").reshape(16, 24)
    pieces = cut(array, parts)
    assert pieces.gaps() is None
    for index in np.ndindex(*asked):
        size = [n // p for n, p in zip(array.shape, asked, strict=True)]
        region = tuple(
            slice(i * s, (i + 1) * s) for i, s in zip(index, size, strict=True)
        )
        assert pieces.region(region).tobytes() == array[region].tobytes()
    assert pieces.whole().tobytes() == array.tobytes()


def test_a_region_a_piece_is_comes_back_without_a_copy() -> None:
    pieces = cut(np.ones((8, 8), "float32"), (1, 2))
    starts, held = pieces.pieces[1]
    assert pieces.region((slice(0, 8), slice(4, 8))) is held


@pytest.mark.parametrize(
    ("pieces", "said"),
    [
        ([((0, 0), np.ones((4, 4))), ((0, 2), np.ones((4, 2)))], "overlap"),
        ([((0, 0), np.ones((4, 2)))], "hold 8 of 16 elements"),
        ([((0, 0), np.ones((4, 4))), ((0, 4), np.ones((4, 1)))], "lies outside"),
        ([((0,), np.ones(16))], "has 1 axes"),
    ],
    ids=["overlap", "gap", "outside", "axes"],
)
def test_pieces_that_do_not_make_the_array_are_named(pieces, said) -> None:
    found = HostPieces(shape=(4, 4), pieces=pieces)
    assert said in (found.gaps() or "")
    arrays = {piece_name("model/000000", s): a for s, a in pieces}
    with pytest.raises(DamagedCheckpointError, match="do not make it up"):
        join(arrays, {"model/000000": (4, 4)})


def test_join_refuses_pieces_of_an_unlisted_tensor_and_a_double() -> None:
    piece = np.ones((2, 2))
    with pytest.raises(DamagedCheckpointError, match="does not list"):
        join({"model/000009@0,0": piece}, {"model/000000": (2, 2)})
    with pytest.raises(DamagedCheckpointError, match="whole and in pieces"):
        join(
            {"model/000000": piece, "model/000000@0,0": piece},
            {"model/000000": (2, 2)},
        )
    with pytest.raises(DamagedCheckpointError, match="malformed"):
        join({"model/000000@0,x": piece}, {"model/000000": (2, 2)})


def build() -> keras.Model:
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16)])
    model.compile(optimizer="adam", loss="mse")
    return model


def test_tensorflow_reads_a_kernel_stored_in_pieces(tmp_path) -> None:
    """What a JAX run on a (2, 4) mesh writes: the kernel in four pieces."""
    source = build()
    kernel = np.random.default_rng(3).normal(size=(8, 16)).astype("float32")
    source.variables[0].assign(kernel)
    state = ArrayState(source)
    prefix = os.path.join(str(tmp_path), "ckpt")
    state.write(prefix)
    path = prefix + ".safetensors"
    arrays = {n: np.array(a) for n, a in read_arrays(path).items()}
    assert arrays.pop("model/000000").tobytes() == kernel.tobytes()
    arrays.update(
        (piece_name("model/000000", s), a) for s, a in cut(kernel, (1, 4)).pieces
    )
    write_arrays(path, arrays)
    fresh = build()
    ArrayState(fresh).restore(prefix, state.structure)
    assert fresh.variables[0].numpy().tobytes() == kernel.tobytes()
    # One piece lost: refused before anything is assigned.
    del arrays[piece_name("model/000000", (0, 12))]
    write_arrays(path, arrays)
    other = build()
    before = other.variables[0].numpy().copy()
    with pytest.raises(DamagedCheckpointError, match="hold 96 of 128 elements"):
        ArrayState(other).restore(prefix, state.structure)
    assert other.variables[0].numpy().tobytes() == before.tobytes()
