"""The checkpoint-format registry: names in manifests, old manifests sniffed.

Pure lookups, no framework: the formats' own round trips are in
tests/test_checkpoint_manager.py (both formats on TensorFlow) and
tests/on_jax/test_arrays.py (the portable one on JAX).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from colab_resume.checkpoint import formats
from colab_resume.checkpoint.errors import StructureMismatchError
from colab_resume.errors import CorruptRecordError
from colab_resume.protocol.manifest import FileEntry, Manifest


def manifest(*names: str, state_format: str | None = None) -> Manifest:
    return Manifest(
        step=1,
        epoch=0,
        lease=1,
        wall_time=0.0,
        files=tuple(FileEntry(name=n, size=1, crc32c="AAAAAA==") for n in names),
        state_format=state_format,
    )


def test_every_registered_format_answers_to_its_name():
    for name in formats.REGISTRY:
        assert formats.named(name).name == name


def test_a_manifest_names_its_format_and_the_name_decides():
    named = manifest("ckpt.index", "ckpt.data-00000-of-00001", state_format="portable")
    back = Manifest.from_json(named.to_json())
    assert back.state_format == "portable"
    # The name wins over what the files look like.
    assert formats.of_manifest(back).name == "portable"


def test_manifests_from_before_formats_had_names_are_told_by_their_files():
    old = manifest("ckpt.safetensors").to_json()
    assert "state_format" not in old  # as earlier versions wrote them
    assert formats.of_manifest(Manifest.from_json(old)).name == "portable"
    shards = manifest(
        "ckpt.00000-of-00002.safetensors", "ckpt.00001-of-00002.safetensors"
    )
    assert formats.of_manifest(shards).name == "portable"
    tf = manifest("ckpt.index", "ckpt.data-00000-of-00001")
    assert formats.of_manifest(tf).name == "tensorflow"


def test_a_format_this_version_does_not_know_is_refused_by_name():
    newer = manifest("ckpt.zarr", state_format="zarr")
    with pytest.raises(StructureMismatchError, match="format 'zarr', which this"):
        formats.of_manifest(newer)


def test_a_format_name_that_is_not_a_plain_name_is_a_damaged_manifest():
    record = manifest("ckpt.safetensors").to_json()
    record["state_format"] = "../../etc"
    with pytest.raises(CorruptRecordError):
        Manifest.from_json(record)


def test_asking_for_one_format_imports_no_other_and_no_framework():
    """The registry holds import strings: the portable format loads alone."""
    probe = (
        "import sys\n"
        "from colab_resume.checkpoint import formats\n"
        "formats.named('portable')\n"
        "print(sorted(m for m in ('tensorflow', 'jax', "
        "'colab_resume.checkpoint.formats.tensorflow') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
