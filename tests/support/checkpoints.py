"""What the tests need to know of checkpoint files."""

from __future__ import annotations


def is_data_file(path: str) -> bool:
    """True for a file holding tensor bytes, in either checkpoint format.

    Portable checkpoints are safetensors shards; TensorFlow's own format
    has ``ckpt.data-0000N-of-0000M`` beside its ``ckpt.index``.
    """
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".safetensors") or ".data-" in name
