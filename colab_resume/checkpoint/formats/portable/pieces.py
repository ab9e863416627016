"""A sharded variable in the files: one tensor per piece, named by its offsets.

A variable the host holds as :class:`~colab_resume.backend.host_pieces.HostPieces`
(sharded over devices, read shard by shard) is written as one safetensors
tensor per piece, ``<tensor>@<start>,<start>...`` (``model/000003@0,512``),
beside the whole tensors of the other variables. The manifest's structure
still lists the whole variable (its shape and dtype), so a reader on any
backend or mesh puts the pieces back together, or takes from them only the
regions its devices hold. Files without pieces read as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from colab_resume.backend.host_pieces import HostPieces
from colab_resume.checkpoint.errors import DamagedCheckpointError

MARK = "@"

# Header allowance, in tensors, per variable the manifest lists: a variable
# split over a pod's devices is written as hundreds of pieces.
PIECES_ALLOWANCE = 64


def tensor_bound(structure: Mapping[str, Any]) -> int:
    """How many tensors the files of a checkpoint of ``structure`` may hold
    (each variable whole or in pieces): the bound on their headers."""
    listed = sum(len(v) for v in structure.values() if isinstance(v, list))
    return listed * PIECES_ALLOWANCE


def piece_name(tensor: str, starts: tuple[int, ...]) -> str:
    return f"{tensor}{MARK}{','.join(str(s) for s in starts)}"


def flatten(arrays: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """``(tensor name, host array)`` to write: pieces one by one, the rest as is."""
    for name, value in arrays.items():
        if isinstance(value, HostPieces):
            for starts, array in value.pieces:
                yield piece_name(name, starts), array
        else:
            yield name, value


def join(arrays: dict[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Replace the pieces in ``arrays`` by one :class:`HostPieces` per tensor.

    Args:
        arrays: tensor name -> array, as read from the files.
        shapes: tensor name -> the whole shape the manifest lists.

    Raises:
        DamagedCheckpointError: a piece of a tensor the manifest does not
            list, a malformed name, a tensor stored both whole and in
            pieces, or pieces that do not cover it exactly once.
    """
    found: dict[str, list[tuple[tuple[int, ...], Any]]] = {}
    for name in [n for n in arrays if MARK in n]:
        tensor, _, offsets = name.partition(MARK)
        try:
            starts = tuple(int(s) for s in offsets.split(","))
        except ValueError:
            raise DamagedCheckpointError(
                f"tensor {name!r}: a malformed piece name"
            ) from None
        found.setdefault(tensor, []).append((starts, arrays.pop(name)))
    for tensor, pieces in found.items():
        if tensor not in shapes:
            raise DamagedCheckpointError(
                f"the shards hold pieces of {tensor}, which the manifest does not list"
            )
        if tensor in arrays:
            raise DamagedCheckpointError(
                f"tensor {tensor} is stored whole and in pieces"
            )
        value = HostPieces(shape=tuple(shapes[tensor]), pieces=pieces)
        wrong = value.gaps()
        if wrong is not None or len({str(a.dtype) for _, a in pieces}) != 1:
            raise DamagedCheckpointError(
                f"the pieces of {tensor} do not make it up: {wrong or 'mixed dtypes'}"
            )
        arrays[tensor] = value
