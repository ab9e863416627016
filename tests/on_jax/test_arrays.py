"""The safetensors host-array file: every dtype Keras uses round-trips."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np

from colab_resume.checkpoint.arrays import read_arrays, write_arrays


def test_dtypes_and_scalars_round_trip(tmp_path: os.PathLike[str]) -> None:
    arrays = {
        "model/000000": np.arange(6, dtype=ml_dtypes.bfloat16).reshape(2, 3),
        "model/000001": np.array(7, dtype="int32"),  # 0-d stays 0-d
        "model/000002": np.array([1, 2], dtype="uint32"),
        "optimizer/000000": np.linspace(0, 1, 5, dtype="float32"),
        "optimizer/000001": np.zeros((0, 4), dtype="float16"),
        "rng/000000": np.array([True, False]),
        "x/000000": np.arange(3, dtype="int64")[::-1],  # not contiguous
    }
    path = os.path.join(tmp_path, "ckpt.safetensors")
    write_arrays(path, arrays)
    back = read_arrays(path)
    assert sorted(back) == sorted(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype, name
        assert back[name].shape == array.shape, name
        assert back[name].tobytes() == np.asarray(array, order="C").tobytes(), name


def test_array_state_restores_a_bfloat16_model_by_position(
    tmp_path: os.PathLike[str],
) -> None:
    import keras
    import pytest

    from colab_resume.checkpoint.arrays import ArrayState
    from colab_resume.checkpoint.errors import StructureMismatchError

    def build(units: int = 3) -> keras.Model:
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(units, dtype="bfloat16")]
        )
        model.compile(optimizer="adam", loss="mse")
        return model

    saved = build()
    state = ArrayState(saved)
    assert [d[2] for d in state.structure["model"]] == ["bfloat16", "bfloat16"]
    prefix = os.path.join(tmp_path, "ckpt")
    state.write(prefix)
    before = [keras.ops.convert_to_numpy(v.value) for v in saved.variables]

    fresh = build()  # other random weights, new layer names
    ArrayState(fresh).restore(prefix, state.structure)
    after = [keras.ops.convert_to_numpy(v.value) for v in fresh.variables]
    assert [a.tobytes() for a in after] == [b.tobytes() for b in before]
    assert all(a.dtype == b.dtype for a, b in zip(after, before, strict=True))

    other = build(units=5)
    with pytest.raises(StructureMismatchError, match="does not fit"):
        ArrayState(other).restore(prefix, state.structure)
