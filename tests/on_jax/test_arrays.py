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
