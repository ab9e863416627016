"""What a checkpoint format is: the protocols every format implements.

A format turns one training state into checkpoint files and back. The
checkpoint manager, the download and the restore deal only in these
protocols; which format a checkpoint is in is the name its manifest
records (``state_format``), looked up in the registry
(:mod:`colab_resume.checkpoint.formats`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from colab_resume.checkpoint.groups import StateLike
from colab_resume.protocol.manifest import FileEntry
from colab_resume.protocol.objects import SharedObjects


@dataclasses.dataclass(frozen=True)
class FormatSettings:
    """How the run wants its checkpoints written and read.

    Attributes:
        shard_bytes: about how many bytes of tensors one file holds.
        write_behind: leave serialising and writing the files to the upload
            thread (:meth:`StateWriter.sync`).
        io_device: where TensorFlow's format reads and writes files (a
            remote TPU's host), or None; other formats ignore it.
        frozen: ``"once"``: arrays no training step changes go to shared
            objects written once per run (the portable format); ``"every"``:
            every array into every checkpoint.
    """

    shard_bytes: int = 32 << 20
    write_behind: bool = False
    io_device: str | None = None
    frozen: str = "every"


@dataclasses.dataclass(frozen=True)
class ObjectFile:
    """A shared object a save wrote to local disk, to upload before its commit.

    Attributes:
        local_path: the file.
        entry: its name (``<sha256>.safetensors``), size and CRC32C.
        rewrite: upload it even where the run directory already lists an
            object of that name (the one there was found damaged).
    """

    local_path: str
    entry: FileEntry
    rewrite: bool = False


class StateWriter(Protocol):
    """One training state written as checkpoint files in one format.

    Made once per state and reused across saves until :meth:`outdated`.

    Attributes:
        source: the state it lists (a model, a model with extras, a mapping).
        structure: group -> ``[name, shape, dtype]`` per variable (or
            ``"object:<type>"`` for an opaque trackable), as the manifest
            records it.
    """

    source: StateLike
    structure: dict[str, Any]

    def outdated(self) -> bool:
        """True once the state's variables are not the ones listed."""
        ...

    @property
    def nbytes(self) -> int:
        """Approximate bytes of the variables."""
        ...

    def write(self, prefix: str) -> None:
        """Take what a save needs now (the training thread waits for this)."""
        ...

    def write_part(self, prefix: str) -> None:
        """:meth:`write` for a process of a multi-process run that does not
        commit: only the pieces of sharded variables that this process's
        devices alone hold (none where the state is replicated)."""
        ...

    def sync(self) -> None:
        """Finish the files on local disk (the upload thread calls this)."""
        ...

    def committed(self) -> None:
        """The checkpoint is committed: set up what makes the next saves
        cheaper (the upload thread calls this, after the commit, so that a
        session's first checkpoint does not wait for it)."""
        ...

    def objects(self) -> tuple[SharedObjects | None, list[ObjectFile]]:
        """The shared objects the last write's checkpoint references (None:
        its own files hold every array), and those of them it wrote to local
        disk (after :meth:`sync`)."""
        ...

    def forget_objects(self) -> None:
        """The run directory lacks an object the writer took as stored:
        the next save writes its arrays again."""
        ...


class StateReader(Protocol):
    """Checkpoint files of one format read into a live training state."""

    structure: dict[str, Any]

    def restore(
        self,
        prefix: str,
        saved: dict[str, Any],
        files: Sequence[FileEntry] | None = None,
        arrived: Callable[[str], dict[str, Any] | None] | None = None,
        objects: SharedObjects | None = None,
    ) -> list[str]:
        """Read the files at ``prefix`` into the live variables; the optional
        groups skipped because they did not fit.

        ``objects``: the shared objects the manifest references; their files
        lie next to ``prefix`` under their own names.

        ``arrived(name)``, where given, blocks until file ``name`` of
        ``files`` is on local disk and verified (the others may still be
        downloading); it is called for every file before anything is
        assigned, and returns what :meth:`Format.read_file` read of it
        while the others downloaded, if anything."""
        ...


class Format(Protocol):
    """A checkpoint format, registered under its :attr:`name`.

    Attributes:
        name: what a manifest records as its ``state_format``.
        reads_while_arriving: its files can be read one by one as each is
            downloaded (then :meth:`read_file` reads them), rather than
            together once all have arrived.
    """

    name: str
    reads_while_arriving: bool

    def writer(self, state: StateLike, settings: FormatSettings) -> StateWriter:
        """The writer of ``state``'s checkpoints.

        Raises:
            NotPortableError: the state holds what this format cannot.
        """
        ...

    def reader(
        self, state: StateLike, settings: FormatSettings, writer: Any = None
    ) -> StateReader:
        """The reader into ``state``, reusing ``writer`` where it is this
        format's (its traced functions and captured variables)."""
        ...

    def read_file(self, path: str, entry: FileEntry, tensors: int) -> Any:
        """One downloaded file's contents, checked against ``entry``, read
        while the others download; None for a file not read on its own."""
        ...
