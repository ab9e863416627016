"""Checkpoint formats: one protocol, a registry by name, the name in each manifest.

Two formats exist. The *portable* one (:mod:`.portable`, safetensors shards
of host arrays) is written by both backends and read by both: a run moves
between TensorFlow and JAX, replica counts and precision policies.
TensorFlow's own ``tf.train.Checkpoint`` format (:mod:`.tensorflow`) is
written only where a state group is an opaque TensorFlow trackable that is
not made of variables, or where ``checkpoint_format="tensorflow"`` asks
for it; the TensorFlow backend keeps reading checkpoints earlier versions
wrote in it.

Each manifest names the format its state is in (``state_format``); the
registry maps the name to the module that implements it, as an import
string, so that asking for one format imports no other (and reading the
registry imports none). A manifest written before formats had names is
told by its files, in :func:`sniff` alone. A third format is a module with
a ``FORMAT`` (:class:`~.base.Format`) and a line in :data:`REGISTRY`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from colab_resume import backend
from colab_resume.checkpoint.errors import StructureMismatchError
from colab_resume.checkpoint.formats.base import (
    Format,
    FormatSettings,
    StateReader,
    StateWriter,
)
from colab_resume.checkpoint.groups import StateLike
from colab_resume.protocol.manifest import Manifest

__all__ = [
    "PORTABLE",
    "REGISTRY",
    "TENSORFLOW",
    "Format",
    "FormatSettings",
    "StateReader",
    "StateWriter",
    "for_reading",
    "for_saving",
    "named",
    "of_manifest",
    "sniff",
]

PORTABLE = "portable"
TENSORFLOW = "tensorflow"
# name -> "module:attribute" of its Format.
REGISTRY = {
    PORTABLE: "colab_resume.checkpoint.formats.portable:FORMAT",
    TENSORFLOW: "colab_resume.checkpoint.formats.tensorflow:FORMAT",
}


def named(name: str) -> Format:
    """The format registered as ``name``.

    Raises:
        StructureMismatchError: no format of that name (a checkpoint from a
            newer version, or a damaged manifest).
    """
    where = REGISTRY.get(name)
    if where is None:
        raise StructureMismatchError(
            f"the checkpoint's state is in format {name!r}, which this version "
            f"does not know (it knows {', '.join(sorted(REGISTRY))}); upgrade "
            f"colab-resume to continue this run."
        )
    module, _, attribute = where.partition(":")
    fmt: Format = getattr(importlib.import_module(module), attribute)
    return fmt


def sniff(file_names: Iterable[str]) -> str:
    """The format of a checkpoint whose manifest names none (written before
    formats had names): safetensors shards are the portable format's, any
    other files TensorFlow's."""
    names = [str(name) for name in file_names]
    return PORTABLE if any(n.endswith(".safetensors") for n in names) else TENSORFLOW


def of_manifest(manifest: Manifest) -> Format:
    """The format ``manifest``'s checkpoint is in (see :func:`named`)."""
    name = manifest.state_format or sniff(f.name for f in manifest.files)
    return named(name)


def for_saving(
    state: StateLike, *, format: str, settings: FormatSettings
) -> tuple[StateWriter, str, str | None]:
    """The writer of ``state``'s checkpoints.

    Returns:
        The writer, its format's name, and why it is not the format asked
        for (None when it is).

    Raises:
        NotPortableError: on JAX, a group is not made of variables.
    """
    from colab_resume.checkpoint.formats.portable import NotPortableError

    only_portable = backend.current().portable_only
    if not (only_portable or format == PORTABLE):
        return named(format).writer(state, settings), format, None
    try:
        return named(PORTABLE).writer(state, settings), PORTABLE, None
    except NotPortableError as exc:
        if only_portable:
            raise
        why = (
            f"{exc} This run's checkpoints use TensorFlow's own format: "
            f"only the TensorFlow backend can continue it."
        )
        return named(TENSORFLOW).writer(state, settings), TENSORFLOW, why


def for_reading(
    state: StateLike,
    manifest: Manifest,
    settings: FormatSettings,
    writer: StateWriter | None = None,
) -> StateReader:
    """The reader of ``manifest``'s checkpoint into ``state``, reusing
    ``writer`` where it is of the same format.

    Raises:
        StructureMismatchError: the checkpoint's format cannot be read into
            this state on this backend.
    """
    from colab_resume.checkpoint.formats.portable import NotPortableError

    fmt = of_manifest(manifest)
    if fmt.name != PORTABLE and backend.current().portable_only:
        raise StructureMismatchError(
            "This checkpoint is in TensorFlow's own format (written by a "
            "TensorFlow session with an opaque trackable in its state, by "
            "checkpoint_format='tensorflow', or by an earlier version); the "
            "JAX backend reads only portable checkpoints. Continue this run "
            "with KERAS_BACKEND=tensorflow, or start a new run_dir."
        )
    try:
        return fmt.reader(state, settings, writer)
    except NotPortableError as exc:
        raise StructureMismatchError(
            f"The checkpoint holds host arrays, but {exc}"
        ) from None
