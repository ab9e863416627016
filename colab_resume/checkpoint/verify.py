"""Verifying one committed checkpoint end to end, without a model or a framework.

What ``colab-resume verify`` runs: the manifest is read and checked against
its directory's name and the listing, then every file the checkpoint needs
is downloaded, its own files and the shared objects it references alike,
each checked against the size and CRC32C the manifest lists as it
streams in. The portable format's files are then read (header and every
offset checked, the CRC32C again over the bytes read): every variable the
manifest's structure lists must be in exactly one of them, with its shape
and dtype, and every array of a shared object must have the SHA-256 the
manifest records. Arrays a ``frozen="rebuild"`` checkpoint stores nowhere
are only counted: their check needs the model (it is the restore's).
TensorFlow's own format is checked as files only (its reader is
TensorFlow).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

from colab_resume.checkpoint import formats
from colab_resume.checkpoint.errors import DamagedCheckpointError
from colab_resume.checkpoint.fetch import (
    Damaged,
    check_arrival,
    check_listing,
    read_manifest,
)
from colab_resume.checkpoint.formats.portable.dtypes import numpy_dtype
from colab_resume.checkpoint.formats.portable.pieces import join, tensor_bound
from colab_resume.checkpoint.formats.portable.shards import (
    SUFFIX,
    read_arrays,
    tensor_name,
)
from colab_resume.protocol.listing import CheckpointDir
from colab_resume.protocol.manifest import FileEntry, Manifest
from colab_resume.protocol.objects import array_digest, object_path
from colab_resume.storage import Storage


@dataclasses.dataclass
class Finding:
    """One thing checked: a file, or the tensors as a whole.

    Attributes:
        what: the file's run path, or ``"tensors"``.
        ok: whether it holds.
        detail: what was found (sizes, counts), or what is wrong.
    """

    what: str
    ok: bool
    detail: str


@dataclasses.dataclass
class Verdict:
    """What :func:`verify` found for one checkpoint.

    Attributes:
        checkpoint: its run path (``checkpoints/step-...``).
        findings: every check, in the order done.
    """

    checkpoint: str
    findings: list[Finding] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.findings) and all(f.ok for f in self.findings)


def verify(
    storage: Storage, entry: CheckpointDir, scratch_dir: str | None = None
) -> Verdict:
    """Read and check everything checkpoint ``entry`` needs.

    Args:
        storage: the run directory.
        entry: a committed checkpoint from its listing.
        scratch_dir: parent of the temporary download directory.

    Raises:
        StorageError: storage unavailable past its retries (not damage).
    """
    verdict = Verdict(entry.name.path)
    try:
        manifest = read_manifest(storage, entry)
        check_listing(manifest, entry)
    except Damaged as exc:
        where = f"{entry.name.path}/MANIFEST.json"
        verdict.findings.append(Finding(where, False, str(exc)))
        return verdict
    shared = manifest.objects.files if manifest.objects is not None else ()
    wanted = [(f"{entry.name.path}/{f.name}", f) for f in manifest.files]
    wanted += [(object_path(f.name), f) for f in shared]
    portable = formats.of_manifest(manifest).name == formats.PORTABLE
    arrays: dict[str, tuple[str, object]] = {}  # tensor -> (file, its array)
    with tempfile.TemporaryDirectory(prefix="verify-", dir=scratch_dir) as scratch:
        for path, item in wanted:
            finding = _fetch(storage, path, item, scratch)
            verdict.findings.append(finding)
            if finding.ok and portable and item.name.endswith(SUFFIX):
                finding.ok, finding.detail = _read(
                    os.path.join(scratch, item.name), path, item, manifest, arrays
                )
            _remove(os.path.join(scratch, item.name))
    if portable and all(f.ok for f in verdict.findings):
        verdict.findings.append(_tensors(manifest, arrays))
    return verdict


def _fetch(storage: Storage, path: str, item: FileEntry, scratch: str) -> Finding:
    local = os.path.join(scratch, item.name)
    try:
        size, crc = storage.get_file_checked(path, local)
        check_arrival(item, size, crc)
    except FileNotFoundError:
        return Finding(path, False, "missing")
    except Damaged as exc:
        return Finding(path, False, str(exc))
    return Finding(path, True, f"{size} bytes, CRC32C {crc}")


def _read(
    local: str,
    path: str,
    item: FileEntry,
    manifest: Manifest,
    arrays: dict[str, tuple[str, object]],
) -> tuple[bool, str]:
    """Read one safetensors file: its tensors into ``arrays``, the digests of
    a shared object's arrays checked."""
    try:
        found = read_arrays(local, tensors=tensor_bound(manifest.structure), entry=item)
    except DamagedCheckpointError as exc:
        return False, str(exc)
    twice = sorted(set(found) & set(arrays))
    if twice:
        return False, f"holds tensors another file holds too: {twice[:5]}"
    held = manifest.objects.holds(item.name) if manifest.objects else {}
    for tensor, digest in held.items():
        if tensor not in found:
            return False, f"lacks tensor {tensor}, which the manifest says it holds"
        if array_digest(found[tensor]) != digest:
            return False, f"tensor {tensor} is not the array the manifest records"
    arrays.update((tensor, (path, value)) for tensor, value in found.items())
    extra = f", {len(held)} arrays matching their SHA-256" if held else ""
    return True, f"{item.size} bytes, CRC32C {item.crc32c}, {len(found)} tensors{extra}"


def _tensors(manifest: Manifest, arrays: dict[str, tuple[str, object]]) -> Finding:
    """Every variable of the structure in one file (or in pieces that make
    it up exactly), shape and dtype as listed."""
    problems = []
    expected = set()
    rebuilt = manifest.objects.rebuilt if manifest.objects is not None else {}
    shapes = {
        tensor_name(group, index): tuple(shape)
        for group, variables in manifest.structure.items()
        if isinstance(variables, list)
        for index, (_, shape, _) in enumerate(variables)
    }
    found = {name: value for name, (_, value) in arrays.items()}
    try:
        join(found, shapes)  # a sharded variable's pieces, as one
    except DamagedCheckpointError as exc:
        return Finding("tensors", False, str(exc))
    for group, variables in manifest.structure.items():
        if not isinstance(variables, list):
            continue
        for index, (_, shape, dtype) in enumerate(variables):
            name = tensor_name(group, index)
            expected.add(name)
            value = found.get(name)
            if value is None and name in rebuilt:
                continue  # frozen="rebuild": stored nowhere, by design
            if value is None:
                problems.append(f"{name} is in no file")
                continue
            got_shape = list(getattr(value, "shape", ()))
            got_dtype = getattr(value, "dtype", None)
            if got_shape != list(shape) or got_dtype != numpy_dtype(dtype):
                problems.append(
                    f"{name} is {got_dtype}{got_shape}, listed "
                    f"{numpy_dtype(dtype)}{list(shape)}"
                )
    strays = sorted(set(found) - expected)
    if strays:
        problems.append(f"tensors the structure does not list: {strays[:5]}")
    if problems:
        return Finding("tensors", False, "; ".join(problems[:10]))
    note = (
        f"; {len(rebuilt)} stored nowhere (frozen='rebuild': build_model() "
        f"makes them, checked against their SHA-256 at restore)"
        if rebuilt
        else ""
    )
    return Finding(
        "tensors",
        True,
        f"all {len(expected)} variables of the structure, shape and dtype as "
        f"listed{note}",
    )


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
