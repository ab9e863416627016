"""Which arrays no training step changes: the frozen part of a fine-tune.

With ``frozen="once"`` these arrays are written to shared objects once per
run (:mod:`colab_resume.protocol.objects`) instead of into every
checkpoint. The rule is conservative; an array is frozen only when all of
these hold:

- it is a variable of a ``keras.Model`` in the state, not in the model's
  ``trainable_variables`` (so no optimizer updates it);
- no other group holds it (optimizer slots, metric state, random-generator
  state) and it is a floating-point array (counters and seed states are
  integers);
- its layer cannot change it in ``call``: the layer is not trainable
  (Keras runs a frozen ``BatchNormalization`` in inference mode, so its
  moving statistics stay), or it is a LoRA layer's frozen kernel
  (``layer.enable_lora(rank)``).

A ``BatchNormalization`` that trains keeps its moving statistics in
non-trainable variables it updates in ``call``: they are saved every time.
A custom layer that sets ``trainable = False`` and still assigns its own
variables in ``call`` breaks the rule; use ``frozen="every"`` for it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Set
from typing import Any

from colab_resume.checkpoint.formats.base import ObjectFile
from colab_resume.checkpoint.formats.portable.shard_write import write_shard
from colab_resume.checkpoint.formats.portable.shards import (
    SUFFIX,
    plan_shards,
    tensor_name,
)
from colab_resume.checkpoint.groups import StateLike, expand
from colab_resume.protocol.manifest import FileEntry
from colab_resume.protocol.objects import SharedObjects, array_digest

ONCE = "once"
EVERY = "every"
REBUILD = "rebuild"
MODES = (ONCE, EVERY, REBUILD)


def frozen_tensors(state: StateLike, groups: dict[str, list[Any]]) -> list[str]:
    """Tensor names (``model/000003``) of the arrays no training step changes.

    Args:
        state: the live state, as given to the format.
        groups: its groups of variables, as the portable format lists them
            (:func:`~colab_resume.checkpoint.formats.portable.portable_groups`).
    """
    import keras

    objects = expand(state)
    held_elsewhere = {
        id(v)
        for group, variables in groups.items()
        if not isinstance(objects.get(group), keras.Model)
        for v in variables
    }
    found: list[str] = []
    for group, variables in groups.items():
        model = objects.get(group)
        if not isinstance(model, keras.Model):
            continue
        still = _unchanging(model) - held_elsewhere
        found.extend(
            tensor_name(group, i)
            for i, v in enumerate(variables)
            if id(v) in still and _floating(v)
        )
    return found


def _unchanging(model: Any) -> set[int]:
    """Ids of the variables of ``model``'s layers that training leaves alone."""
    trainable = {id(v) for v in model.trainable_variables}
    still: set[int] = set()
    for layer in model._flatten_layers(include_self=False):
        if not layer.trainable:
            still.update(id(v) for v in layer.variables)
        elif getattr(layer, "lora_enabled", False):
            own = [
                *getattr(layer, "_trainable_variables", []),
                *getattr(layer, "_non_trainable_variables", []),
            ]
            still.update(id(v) for v in own if not v.trainable)
    return still - trainable


def _floating(variable: Any) -> bool:
    dtype = str(getattr(variable, "dtype", ""))
    return "float" in dtype and "seed_generator" not in str(
        getattr(variable, "path", variable.name)
    )


def write_objects(
    directory: str,
    arrays: dict[str, Any],
    shard_bytes: int,
    *,
    rewrite: Set[str] = frozenset(),
    presets: tuple[str, ...] = (),
) -> tuple[SharedObjects, list[ObjectFile]]:
    """Write frozen ``arrays`` as shared objects in ``directory``.

    The shards are laid out as a checkpoint's are (about ``shard_bytes``
    each, in the arrays' order), so the same arrays always make the same
    files, and each file is named by the SHA-256 of its bytes: a later
    session that writes them again finds them stored. Each array is dropped
    from ``arrays`` once its file is written.

    Args:
        rewrite: object names to upload even where stored (found damaged).
        presets: the keras-hub presets the arrays were loaded from.

    Returns:
        What a manifest records of them, and the files to upload.
    """
    os.makedirs(directory, exist_ok=True)
    digests = {name: array_digest(array) for name, array in arrays.items()}
    names = list(arrays)
    runs = plan_shards([int(arrays[n].nbytes) for n in names], shard_bytes)
    held: dict[str, tuple[str, str]] = {}
    files: list[ObjectFile] = []
    for index, run in enumerate(runs):
        shard = {names[i]: arrays.pop(names[i]) for i in run}
        staged = os.path.join(directory, f"object-{index:05d}.tmp")
        size, crc = write_shard(staged, shard)
        del shard
        object_name = _sha256_file(staged) + SUFFIX
        path = os.path.join(directory, object_name)
        os.replace(staged, path)
        entry = FileEntry(name=object_name, size=size, crc32c=crc)
        files.append(ObjectFile(path, entry, rewrite=object_name in rewrite))
        held.update((names[i], (object_name, digests[names[i]])) for i in run)
    shared = SharedObjects(
        files=tuple(f.entry for f in files), arrays=held, presets=presets
    )
    return shared, files


def fingerprint(arrays: dict[str, Any], presets: tuple[str, ...] = ()) -> SharedObjects:
    """What a checkpoint records of frozen ``arrays`` it does not store
    (``frozen="rebuild"``): each one's SHA-256, and the keras-hub
    ``presets`` they were loaded from; the arrays are dropped."""
    digests = {name: array_digest(arrays.pop(name)) for name in list(arrays)}
    return SharedObjects(files=(), arrays={}, rebuilt=digests, presets=presets)


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()
