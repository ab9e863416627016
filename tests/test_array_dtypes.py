"""Integer variables restore across the backends' choices of width and sign.

Keras keeps a ``SeedGenerator``'s state (every Dropout layer has one) in
``uint32`` on JAX and ``int64`` on TensorFlow, and an optimizer's iteration
count in ``int32`` on JAX without x64. The checkpoint here is one this
TensorFlow model wrote, with those tensors rewritten in the dtypes JAX
writes them in (the JAX side of the same is in
``tests/on_jax/test_arrays.py``; real runs moving between the backends
are in ``tests/on_jax/test_cross_backend.py``).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from support.checkpoints import as_other_backend_wrote, seed_position

from colab_resume.checkpoint.errors import StructureMismatchError
from colab_resume.checkpoint.formats.portable import ArrayState


def build() -> keras.Model:
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dropout(0.3)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def trained() -> keras.Model:
    model = build()
    model.train_on_batch(np.ones((4, 3), "float32"), np.zeros((4, 2), "float32"))
    return model


def test_unsigned_seed_state_restores_into_a_signed_variable(tmp_path):
    seed = np.array([4_000_000_000, 17], dtype="uint32")  # above int32's range
    prefix, structure = as_other_backend_wrote(str(tmp_path), trained(), seed, "int32")
    fresh = build()
    ArrayState(fresh).restore(prefix, structure)
    variable = fresh.variables[seed_position(structure)]
    assert str(variable.dtype) == "int64"
    assert keras.ops.convert_to_numpy(variable.value).tolist() == [4_000_000_000, 17]
    assert int(keras.ops.convert_to_numpy(fresh.optimizer.iterations.value)) == 1


def test_a_seed_value_the_variable_cannot_hold_is_named(tmp_path):
    seed = np.array([2**63 + 5, 0], dtype="uint64")
    prefix, structure = as_other_backend_wrote(str(tmp_path), trained(), seed, "int32")
    with pytest.raises(StructureMismatchError) as raised:
        ArrayState(build()).restore(prefix, structure)
    message = str(raised.value)
    assert "seed_generator_state is int64[2]" in message
    assert f"values from 0 to {2**63 + 5}" in message
    assert "Continue the run on the backend that wrote it" in message


def test_a_float_where_an_integer_was_stays_an_error(tmp_path):
    seed = np.array([1.0, 2.0], dtype="float32")
    prefix, structure = as_other_backend_wrote(str(tmp_path), trained(), seed, "int32")
    with pytest.raises(StructureMismatchError, match="does not fit"):
        ArrayState(build()).restore(prefix, structure)
