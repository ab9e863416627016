"""The safetensors host-array file: every dtype Keras uses round-trips."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np

from colab_resume.checkpoint.formats.portable import read_arrays, write_arrays


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

    from colab_resume.checkpoint.errors import StructureMismatchError
    from colab_resume.checkpoint.formats.portable import ArrayState

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


def dropout_model():  # type: ignore[no-untyped-def]
    import keras

    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dropout(0.3)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def test_signed_seed_state_restores_into_the_unsigned_jax_variable(
    tmp_path: os.PathLike[str],
) -> None:
    """TensorFlow writes the seed state as int64; JAX keeps it in uint32."""
    import keras
    from support.checkpoints import as_other_backend_wrote, seed_position

    from colab_resume.checkpoint.formats.portable import ArrayState

    seed = np.array([3_000_000_000, 9], dtype="int64")  # above int32's range
    prefix, structure = as_other_backend_wrote(
        str(tmp_path), dropout_model(), seed, "int64"
    )
    fresh = dropout_model()
    ArrayState(fresh).restore(prefix, structure)
    variable = fresh.variables[seed_position(structure)]
    assert str(variable.dtype) == "uint32"
    assert keras.ops.convert_to_numpy(variable.value).tolist() == [3_000_000_000, 9]


def test_a_negative_seed_value_is_refused_by_name(tmp_path: os.PathLike[str]) -> None:
    import pytest
    from support.checkpoints import as_other_backend_wrote

    from colab_resume.checkpoint.errors import StructureMismatchError
    from colab_resume.checkpoint.formats.portable import ArrayState

    seed = np.array([-1, 0], dtype="int64")
    prefix, structure = as_other_backend_wrote(
        str(tmp_path), dropout_model(), seed, "int64"
    )
    with pytest.raises(StructureMismatchError) as raised:
        ArrayState(dropout_model()).restore(prefix, structure)
    assert "seed_generator_state is uint32[2]" in str(raised.value)
    assert "values from -1 to 0, outside uint32's range" in str(raised.value)
