"""Shared objects: arrays no training step changes, stored once per run.

A fine-tune's frozen base (a LoRA's kernels, frozen embeddings) is the
same at every save. With ``frozen="once"`` its arrays go to
``objects/<sha256>.safetensors`` in the run directory, named by the
SHA-256 of the file's bytes, written by the first save that needs them
and referenced by every later checkpoint's manifest (its top-level
``objects`` field):

```
"objects": {
  "files":  [{"name": "<sha256>.safetensors", "size": ..., "crc32c": ...}],
  "arrays": {"model/000003": ["<sha256>.safetensors", "<array sha256>"], ...}
}
```

Every array an object holds is listed with the object that holds it and
the SHA-256 of its dtype, shape and bytes (:func:`array_digest`), so a
damaged object can be stood in for by the same arrays rebuilt by
``build_model()``. With ``frozen="rebuild"`` the frozen arrays are stored
nowhere: ``"rebuilt": {"model/000003": "<array sha256>", ...}`` records
their fingerprint, which the arrays ``build_model()`` makes must match at
restore. Where ``build_model()`` loaded keras-hub presets, ``"presets":
["kaggle://keras/gemma/keras/gemma_2b_en/3"]`` names them (a manifest
without it, older or of a model built from config, names none). Pure: what
the records hold and how to parse them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

from colab_resume.protocol.files import FileEntry

OBJECT_DIR = "objects"
_OBJECT_RE = re.compile(r"[0-9a-f]{64}\.safetensors")
_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
# A build loads a preset or two (a task's, a tokenizer's); a record naming
# more, or longer handles, is damage.
MAX_PRESETS = 16
MAX_PRESET_CHARS = 1024


def object_path(name: str) -> str:
    """The run-relative path of shared object ``name``."""
    return f"{OBJECT_DIR}/{name}"


def is_object_name(name: str) -> bool:
    """True for a well-formed object name: 64 hex digits and ``.safetensors``."""
    return _OBJECT_RE.fullmatch(name) is not None


def array_digest(array: Any) -> str:
    """SHA-256 (hex) of an array's dtype, shape and little-endian bytes."""
    import numpy as np

    value = np.asarray(array, order="C")
    if value.dtype.byteorder == ">":
        value = value.astype(value.dtype.newbyteorder("<"))
    digest = hashlib.sha256(f"{value.dtype.name}{list(value.shape)}".encode())
    digest.update(value.reshape(-1).view(np.uint8).data)
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True, kw_only=True)
class SharedObjects:
    """The shared objects a checkpoint references, and what each holds.

    Attributes:
        files: each object, with its size and CRC32C (GCS style).
        arrays: tensor name (``model/000003``) -> ``(object name, array
            SHA-256)`` for every tensor an object holds.
        rebuilt: tensor name -> array SHA-256 of every tensor stored
            nowhere (``frozen="rebuild"``): ``build_model()`` makes it.
        presets: the keras-hub presets ``build_model()`` loaded these
            arrays from, as handles (``hf://org/model``, a Kaggle handle
            with its version, a local directory); empty where none is known.
    """

    files: tuple[FileEntry, ...]
    arrays: dict[str, tuple[str, str]]
    rebuilt: dict[str, str] = dataclasses.field(default_factory=dict)
    presets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (
            isinstance(self.presets, tuple)
            and len(self.presets) <= MAX_PRESETS
            and all(
                isinstance(p, str) and 0 < len(p) <= MAX_PRESET_CHARS
                for p in self.presets
            )
        ):
            raise ValueError(
                f"Manifest.objects.presets must be at most {MAX_PRESETS} preset "
                f"handles (strings), got {str(self.presets)[:200]}."
            )
        for tensor, digest in self.rebuilt.items():
            if not (isinstance(digest, str) and _DIGEST_RE.fullmatch(digest)):
                raise ValueError(
                    f"Manifest.objects.rebuilt[{tensor!r}] must be a SHA-256 in "
                    f"hex, got {digest!r}."
                )
        both = sorted(set(self.rebuilt) & set(self.arrays))
        if both:
            raise ValueError(
                f"Manifest.objects lists tensors both stored and rebuilt: {both[:5]}."
            )
        names = [f.name for f in self.files]
        bad = [n for n in names if not is_object_name(n)]
        if bad or len(set(names)) != len(names):
            raise ValueError(
                f"Manifest.objects.files must name distinct objects "
                f"'<sha256>.safetensors', got {names}."
            )
        for tensor, where in self.arrays.items():
            if not (
                isinstance(tensor, str)
                and isinstance(where, tuple)
                and len(where) == 2
                and where[0] in names
                and isinstance(where[1], str)
                and _DIGEST_RE.fullmatch(where[1])
            ):
                raise ValueError(
                    f"Manifest.objects.arrays[{tensor!r}] must be [one of the "
                    f"objects listed, a SHA-256 in hex], got {where!r}."
                )
        unused = set(names) - {o for o, _ in self.arrays.values()}
        if unused:
            raise ValueError(
                f"Manifest.objects.files lists objects no array is in: "
                f"{sorted(unused)}."
            )

    def digests(self) -> dict[str, str]:
        """Tensor name -> array SHA-256 of every tensor it lists."""
        return {**{t: d for t, (_, d) in self.arrays.items()}, **self.rebuilt}

    def holds(self, name: str) -> dict[str, str]:
        """Tensor name -> array SHA-256 of what object ``name`` holds."""
        return {t: d for t, (o, d) in self.arrays.items() if o == name}

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "files": [dataclasses.asdict(f) for f in self.files],
            "arrays": {t: list(where) for t, where in sorted(self.arrays.items())},
        }
        if self.rebuilt:
            value["rebuilt"] = dict(sorted(self.rebuilt.items()))
        if self.presets:
            value["presets"] = list(self.presets)
        return value

    @classmethod
    def from_json(cls, value: Any) -> SharedObjects:
        """Parse the untrusted ``objects`` field of a manifest.

        Raises:
            ValueError, KeyError, TypeError: it is not a valid record.
        """
        if not isinstance(value, dict) or not isinstance(value.get("arrays"), dict):
            raise ValueError(
                "Manifest.objects must be {'files': [...], 'arrays': {...}}, got "
                f"{type(value).__name__}."
            )
        return cls(
            files=tuple(
                FileEntry(name=f["name"], size=f["size"], crc32c=f["crc32c"])
                for f in value["files"]
            ),
            arrays={
                t: tuple(w) if isinstance(w, list) else w
                for t, w in value["arrays"].items()
            },
            rebuilt=dict(value.get("rebuilt", {})),
            presets=_handles(value.get("presets", [])),
        )


def _handles(value: Any) -> tuple[str, ...]:
    """The ``presets`` list of a manifest's ``objects`` field, as a tuple."""
    if not isinstance(value, list):
        raise ValueError(
            f"Manifest.objects.presets must be a list, got {type(value).__name__}."
        )
    return tuple(value)
