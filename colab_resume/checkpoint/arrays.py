"""Checkpoints as host arrays in one safetensors file (the JAX backend).

On JAX there is no ``tf.train.Checkpoint``: every variable of the groups
:func:`~colab_resume.checkpoint.state.expand` names (model, optimizer,
metrics, seed generators, extras) is copied to a host NumPy array with
``keras.ops.convert_to_numpy`` and written as tensor ``<group>/<position>``
(``model/000003``) of ``<prefix>.safetensors``. The manifest's structure
(name, shape, dtype per position) is the same as on TensorFlow, and the file
is uploaded, CRC32C-listed and committed by the same manager.

Why safetensors: a well-kept, documented tensor format (a JSON header, then
raw little-endian bytes; no pickle, so loading a checkpoint runs no code),
readable by NumPy, JAX, PyTorch and TensorFlow alike, with a dtype of its
own for bfloat16 (``BF16``), which ``.npy`` files can only store as opaque
void bytes. It is a small wheel, already on Colab. We read it with the
framework-free ``safetensors.deserialize`` and map dtypes ourselves, since
``safetensors.numpy`` does not know bfloat16 (``ml_dtypes``, which JAX
brings, does).

Restore puts the arrays back by position after checking shapes and dtypes
against the live variables, the rule of
:class:`~colab_resume.checkpoint.state.TrainingState`; a variable created
under a ``keras.distribution`` is re-laid out by its own ``assign``.
"""

from __future__ import annotations

import os
from typing import Any

from colab_resume.checkpoint.errors import StructureMismatchError
from colab_resume.checkpoint.state import (
    StateLike,
    _describe,
    _variable_list,
    check_fits,
    expand,
)

SUFFIX = ".safetensors"

# safetensors dtype codes -> NumPy dtype names ("bfloat16" via ml_dtypes).
_DTYPES = {
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


def _numpy_dtype(name: str) -> Any:
    import numpy as np

    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def tensor_name(group: str, index: int) -> str:
    return f"{group}/{index:06d}"


def write_arrays(path: str, arrays: dict[str, Any]) -> None:
    """Write name -> host array to ``path`` as safetensors."""
    import numpy as np
    from safetensors.numpy import save_file

    # Not np.ascontiguousarray: it turns a 0-d array (a scalar) into shape (1,).
    save_file({k: np.asarray(v, order="C") for k, v in arrays.items()}, path)


def read_arrays(path: str) -> dict[str, Any]:
    """The arrays of a safetensors file, by name, as NumPy arrays."""
    import numpy as np
    from safetensors import deserialize

    with open(path, "rb") as f:
        content = f.read()
    arrays: dict[str, Any] = {}
    for name, entry in deserialize(content):  # type: ignore[no-untyped-call]  # untyped extension module
        code = entry["dtype"]
        if code not in _DTYPES:
            raise StructureMismatchError(
                f"tensor {name} of {path} has dtype {code}, which this version "
                f"cannot read back."
            )
        dtype = _numpy_dtype(_DTYPES[code])
        # A tuple: reshape([]) would leave a scalar as shape (1,).
        shape = tuple(int(d) for d in entry["shape"])
        arrays[name] = np.frombuffer(entry["data"], dtype=dtype).reshape(shape)
    return arrays


class ArrayState:
    """The variables of one training setup, written as host arrays.

    The same interface as :class:`~colab_resume.checkpoint.state.TrainingState`
    (``structure``, ``outdated``, ``write``, ``sync``, ``restore``,
    ``nbytes``), without TensorFlow.

    Args:
        state: a ``keras.Model`` (with its optimizer and metrics), a model
            with extras, or a mapping of name -> model, optimizer, variable.

    Raises:
        TypeError: a group is not made of Keras variables.
    """

    def __init__(self, state: StateLike) -> None:
        self.source = state
        self._setup()

    def _setup(self) -> None:
        self._groups: dict[str, list[Any]] = {}
        self.structure: dict[str, Any] = {}
        for group, obj in expand(self.source).items():
            variables = _variable_list(obj)
            if variables is None:
                raise TypeError(
                    f"state group {group!r} is a {type(obj).__name__}; on the JAX "
                    f"backend a checkpoint holds Keras variables only (a model, an "
                    f"optimizer, a metric, a keras.Variable or a list of them)."
                )
            self._groups[group] = variables
            self.structure[group] = [_describe(v) for v in variables]

    def outdated(self) -> bool:
        """True once the state has variables this object does not list."""
        groups = expand(self.source)
        if set(groups) != set(self._groups):
            return True
        for group, obj in groups.items():
            variables = _variable_list(obj)
            if variables is None or len(variables) != len(self._groups[group]):
                return True
        return False

    @property
    def nbytes(self) -> int:
        total = 0
        for variables in self._groups.values():
            for v in variables:
                size = 1
                for d in v.shape:
                    size *= int(d)
                total += size * _numpy_dtype(str(v.dtype)).itemsize
        return total

    def write(self, prefix: str, options: Any = None) -> None:
        """Copy every variable to host memory and write ``prefix.safetensors``.

        The copy is synchronous (the training thread waits for it); the file
        is on local disk when this returns.
        """
        from keras import ops

        arrays = {
            tensor_name(group, i): ops.convert_to_numpy(v.value)
            for group, variables in self._groups.items()
            for i, v in enumerate(variables)
        }
        write_arrays(prefix + SUFFIX, arrays)

    def sync(self) -> None:
        """Nothing to wait for: :meth:`write` is synchronous."""

    def restore(
        self, prefix: str, saved: dict[str, Any], options: Any = None
    ) -> list[str]:
        """Read ``prefix.safetensors`` into the live variables, by position.

        Returns:
            Optional groups skipped because they did not match.

        Raises:
            StructureMismatchError: a required group differs, or the file
                lacks a tensor the manifest lists.
        """
        skipped = check_fits(self.structure, saved)
        if not os.path.exists(prefix + SUFFIX):
            raise StructureMismatchError(
                "This checkpoint was written by the TensorFlow backend (no "
                f"{os.path.basename(prefix)}{SUFFIX}); the JAX backend cannot read "
                "it yet. Continue this run with KERAS_BACKEND=tensorflow, or start "
                "a new run_dir."
            )
        arrays = read_arrays(prefix + SUFFIX)
        for group, variables in self._groups.items():
            if group in skipped:
                continue
            for i, variable in enumerate(variables):
                name = tensor_name(group, i)
                value = arrays.get(name)
                if value is None:
                    raise StructureMismatchError(
                        f"{os.path.basename(prefix)}{SUFFIX} has no tensor {name}, "
                        f"which its manifest lists: the checkpoint is damaged."
                    )
                if tuple(value.shape) != tuple(variable.shape) or str(
                    value.dtype
                ) != str(variable.dtype):
                    raise StructureMismatchError(
                        f"tensor {name} is {value.dtype}{list(value.shape)}, the "
                        f"variable {variable.path} is "
                        f"{variable.dtype}{list(variable.shape)}."
                    )
                variable.assign(value)
        return skipped
