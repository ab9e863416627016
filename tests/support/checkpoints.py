"""What the tests need to know of checkpoint files."""

from __future__ import annotations

import json
import os
import struct
from typing import Any


def is_data_file(path: str) -> bool:
    """True for a file holding tensor bytes, in either checkpoint format.

    Portable checkpoints are safetensors shards; TensorFlow's own format
    has ``ckpt.data-0000N-of-0000M`` beside its ``ckpt.index``.
    """
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".safetensors") or ".data-" in name


def header(path: str) -> dict[str, Any]:
    """Tensor name -> its entry in a safetensors file's header (read as the
    format documents it, not by the package)."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        found: dict[str, Any] = json.loads(handle.read(length))
    found.pop("__metadata__", None)
    return found


def headers(directory: str) -> dict[str, Any]:
    """:func:`header` over the directory's shard files."""
    found: dict[str, Any] = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors"):
            found.update(header(os.path.join(directory, name)))
    return found


def seed_position(structure: dict) -> int:
    """The position of the one ``seed_generator_state`` in ``structure["model"]``."""
    (position,) = [
        i
        for i, (name, _, _) in enumerate(structure["model"])
        if name.endswith("seed_generator_state")
    ]
    return position


def as_other_backend_wrote(
    directory: str, model: object, seed: object, iteration_dtype: str
) -> tuple[str, dict]:
    """A portable checkpoint of ``model`` as the other backend writes it.

    The checkpoint ``model`` writes, with its Dropout's seed state replaced
    by the array ``seed`` (in its dtype) and the optimizer's iteration count
    cast to ``iteration_dtype``, in the files and in the structure.

    Returns:
        The checkpoint prefix (in the empty folder ``directory``) and the
        structure a manifest would list.
    """
    import os

    from colab_resume.checkpoint.formats.portable import (
        ArrayState,
        read_shards,
        write_shards,
    )

    state = ArrayState(model)
    prefix = os.path.join(directory, "ckpt")
    state.write(prefix)
    arrays = {name: array.copy() for name, array in read_shards(prefix).items()}
    structure = {group: [list(v) for v in vs] for group, vs in state.structure.items()}
    position = seed_position(structure)
    arrays[f"model/{position:06d}"] = seed
    structure["model"][position][2] = str(seed.dtype)  # type: ignore[attr-defined]
    arrays["optimizer/000000"] = arrays["optimizer/000000"].astype(iteration_dtype)
    structure["optimizer"][0][2] = iteration_dtype
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    write_shards(prefix, arrays, 1 << 20)
    return prefix, structure
