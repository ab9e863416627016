"""The commit marker: ``MANIFEST.json``, written last and create-only.

Whether a checkpoint directory counts as committed is decided in one place,
:mod:`colab_resume.protocol.commit`; this module is what the manifest holds.

The manifest lists every file with its size and CRC32C (base64 of the
big-endian CRC32C, the form GCS reports in object metadata), so restore can
verify a checkpoint from a listing without downloading it. It also carries
the training position (step, epoch), the lease of the session that wrote
it, metrics, JSON extras, and the variable structure, so a mismatch can
name the variables that differ.

Manifests are read back from storage and treated as untrusted input.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from typing import Any

from colab_resume.errors import CorruptRecordError
from colab_resume.protocol.parsing import short
from colab_resume.storage.checksum import StreamingCrc32c

FORMAT = "colab_resume.checkpoint/1"
_CHUNK = 1 << 20


def crc32c_bytes(data: bytes) -> str:
    """GCS-style CRC32C of ``data``: base64 of the big-endian 32-bit value."""
    import google_crc32c

    return _encode(google_crc32c.value(data))


def crc32c_file(path: str) -> str:
    """GCS-style CRC32C of a local file, read in chunks."""
    checksum = StreamingCrc32c()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            checksum.update(chunk)
    return checksum.value


def _encode(value: int) -> str:
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileEntry:
    """One file of a checkpoint.

    Attributes:
        name: file name inside the checkpoint directory (no ``/``).
        size: bytes.
        crc32c: GCS-style CRC32C (base64, big-endian).
    """

    name: str
    size: int
    crc32c: str

    def __post_init__(self) -> None:
        _check_plain_name("FileEntry.name", self.name)
        if not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"FileEntry.size must be an int >= 0, got {self.size!r}.")
        if not isinstance(self.crc32c, str) or len(self.crc32c) != 8:
            raise ValueError(
                f"FileEntry.crc32c must be 8 base64 characters, got {self.crc32c!r}."
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Manifest:
    """What a committed checkpoint holds.

    Attributes:
        step: global training step the state belongs to.
        epoch: epoch of that step.
        lease: lease of the session that wrote it.
        wall_time: when the save was taken (seconds since the epoch, writer's
            clock; informational only).
        files: every file of the checkpoint.
        prefix: checkpoint prefix (the file names without their suffix:
            TensorFlow's ``.index`` / ``.data-...``, or ``.safetensors`` for
            the portable format's host arrays).
        state_format: the format the state's files are in, as the
            checkpoint-format registry names it (``"portable"``,
            ``"tensorflow"``); None in manifests written before formats had
            names (their files tell).
        structure: variable groups, ``{group: [[name, shape, dtype], ...]}``
            plus ``{group: "object:<type>"}`` for opaque trackables.
        metrics: JSON-able metrics at the save.
        extras: JSON-able user values; ``fingerprints`` and ``history`` are
            the agent's own and must have the types it reads back.
        processes: processes that wrote it (1: a single-process run).
        markers: with ``processes`` > 1, each process's done marker
            (``PROCESS-k.json``), verified as files are.
    """

    step: int
    epoch: int
    lease: int
    wall_time: float
    files: tuple[FileEntry, ...]
    prefix: str = "ckpt"
    state_format: str | None = None
    structure: dict[str, Any] = dataclasses.field(default_factory=dict)
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)
    processes: int = 1
    markers: tuple[FileEntry, ...] = ()

    def __post_init__(self) -> None:
        self._check_processes()
        for name in ("step", "epoch", "lease"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Manifest.{name} must be an int >= 0, got {value!r}.")
        if not isinstance(self.wall_time, (int, float)) or not math.isfinite(
            self.wall_time
        ):
            raise ValueError(
                f"Manifest.wall_time must be a finite number, got {self.wall_time!r}."
            )
        if not self.files:
            raise ValueError("Manifest.files must list at least one file, got none.")
        names = [entry.name for entry in self.files]
        if len(set(names)) != len(names):
            raise ValueError(f"Manifest.files lists a name twice: {sorted(names)}.")
        # The prefix is joined to the download directory and handed to
        # TensorFlow: an absolute path or '..' would read any checkpoint on
        # the local disk instead of the files just verified.
        _check_plain_name("Manifest.prefix", self.prefix)
        if self.state_format is not None:
            _check_plain_name("Manifest.state_format", self.state_format)
        strays = [n for n in names if not n.startswith(f"{self.prefix}.")]
        if strays:
            raise ValueError(
                f"Manifest.files lists files outside the prefix {self.prefix!r}: "
                f"{sorted(strays)}."
            )
        for name in ("structure", "metrics", "extras"):
            value = getattr(self, name)
            if not isinstance(value, dict):
                raise ValueError(
                    f"Manifest.{name} must be a dict, got {type(value).__name__}."
                )
            try:
                json.dumps(value, allow_nan=True)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"Manifest.{name} must be JSON-able ({exc}); pass plain "
                    f"numbers, strings, lists and dicts, or save the value as a "
                    f"trackable instead."
                ) from None
        _check_agent_extras(self.extras)
        _check_position_extras(self.extras)

    def _check_processes(self) -> None:
        count = self.processes
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"Manifest.processes must be an int >= 1, got {count!r}.")
        want = [f"PROCESS-{k}.json" for k in range(count)] if count > 1 else []
        if sorted(m.name for m in self.markers) != sorted(want):
            raise ValueError(
                f"Manifest.markers must name {want} for {count} process(es), got "
                f"{[m.name for m in self.markers]}."
            )

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    def to_json(self) -> dict[str, Any]:
        value = dataclasses.asdict(self)
        value["files"] = [dataclasses.asdict(entry) for entry in self.files]
        value["markers"] = [dataclasses.asdict(entry) for entry in self.markers]
        value["format"] = FORMAT
        if self.state_format is None:
            del value["state_format"]
        return value

    @classmethod
    def from_json(
        cls, value: dict[str, Any], *, where: str = "MANIFEST.json"
    ) -> Manifest:
        """Parse an untrusted manifest record.

        Raises:
            CorruptRecordError: a field is missing or has the wrong type.
        """
        try:
            if value.get("format") != FORMAT:
                raise ValueError(
                    f"format is {value.get('format')!r}, expected {FORMAT!r}"
                )
            files = tuple(
                FileEntry(name=f["name"], size=f["size"], crc32c=f["crc32c"])
                for f in value["files"]
            )
            return cls(
                step=value["step"],
                epoch=value["epoch"],
                lease=value["lease"],
                wall_time=value["wall_time"],
                files=files,
                prefix=value.get("prefix", "ckpt"),
                state_format=value.get("state_format"),
                structure=value.get("structure", {}),
                metrics=value.get("metrics", {}),
                extras=value.get("extras", {}),
                processes=value.get("processes", 1),
                markers=tuple(
                    FileEntry(name=f["name"], size=f["size"], crc32c=f["crc32c"])
                    for f in value.get("markers", [])
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptRecordError(
                f"{where} is not a valid checkpoint manifest ({type(exc).__name__}: "
                f"{exc}); the checkpoint is treated as damaged."
            ) from None


def _check_plain_name(field: str, name: Any) -> None:
    if (
        not isinstance(name, str)
        or not name
        or name.startswith(".")
        or any(c in name for c in "/\\\0")
    ):
        raise ValueError(f"{field} must be a plain file name, got {name!r}.")


def _check_agent_extras(extras: dict[str, Any]) -> None:
    """The extras the agent itself reads back must have the agent's types.

    A manifest that is valid JSON but carries, say, a list where the
    agent expects its dict of epoch fingerprints would restore and then
    fail training; caught here, it is damage and restore falls back.
    """
    fingerprints = extras.get("fingerprints", {})
    if not (
        isinstance(fingerprints, dict)
        and all(
            isinstance(k, str) and k.isdigit() and isinstance(v, str)
            for k, v in fingerprints.items()
        )
    ):
        raise ValueError(
            "Manifest.extras['fingerprints'] must map epoch numbers (strings) "
            f"to strings, got {short(fingerprints)}."
        )
    history = extras.get("history", {})
    epochs = history.get("epoch", []) if isinstance(history, dict) else None
    curves = history.get("history", {}) if isinstance(history, dict) else None
    if not (
        isinstance(epochs, list)
        and all(isinstance(e, int) and not isinstance(e, bool) for e in epochs)
        and isinstance(curves, dict)
        and all(
            isinstance(k, str) and isinstance(v, list) and all(map(_is_scalar, v))
            for k, v in curves.items()
        )
    ):
        raise ValueError(
            "Manifest.extras['history'] must be {'epoch': [int, ...], "
            f"'history': {{name: [number, ...]}}}}, got {short(history)}."
        )


def _check_position_extras(extras: dict[str, Any]) -> None:
    """``extras['position']``: the proof a resume checks its data position by
    (:mod:`colab_resume.data.trail`)."""
    position = extras.get("position", {})
    if not isinstance(position, dict) or (
        position
        and not (
            set(position) == {"epoch", "batch", "fingerprint"}
            and all(
                isinstance(position[k], int) and not isinstance(position[k], bool)
                for k in ("epoch", "batch")
            )
            and isinstance(position["fingerprint"], str)
        )
    ):
        raise ValueError(
            "Manifest.extras['position'] must be {'epoch': int, 'batch': int, "
            f"'fingerprint': str}}, got {short(position)}."
        )


def _is_scalar(value: Any) -> bool:
    return value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool)
    )
