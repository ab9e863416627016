"""Reading safetensors shards by mapping them (the portable format's shard_file).

Real files written by the safetensors library; damaged ones made by editing
their bytes. A damaged file must be refused with what is wrong, never read
out of bounds or half-read, and a huge header refused before it is read.
"""

from __future__ import annotations

import json
import struct
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from colab_resume.checkpoint.formats.portable import read_arrays, write_arrays
from colab_resume.checkpoint.formats.portable.shard_file import DamagedShardError
from colab_resume.protocol.manifest import FileEntry, crc32c_bytes


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.RandomState(0)
    return {
        "model/000000": rng.randn(3, 5).astype("float32"),
        "model/000001": np.float64(2.5),  # a scalar stays shape ()
        "optimizer/000000": np.array([7, -3], dtype="int64"),
        "optimizer/000001": rng.randn(4).astype(ml_dtypes.bfloat16),
        "metrics/000000": np.array([True, False]),
        "odd/000000": rng.randn(3).astype("float16"),  # leaves later offsets odd
        "odd/000001": rng.randn(2, 2).astype("float64"),
    }


def test_every_tensor_reads_back_bitwise_with_its_dtype_and_shape(tmp_path):
    path = str(tmp_path / "ckpt.safetensors")
    saved = arrays()
    write_arrays(path, saved)
    read = read_arrays(path)
    assert sorted(read) == sorted(saved)
    for name, value in saved.items():
        value = np.asarray(value)
        assert read[name].dtype == value.dtype and read[name].shape == value.shape
        assert read[name].tobytes() == value.tobytes()
        assert not read[name].flags.writeable  # a view of the file


def _header(path) -> tuple[dict, bytes]:
    raw = open(path, "rb").read()
    (length,) = struct.unpack_from("<Q", raw)
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def _write(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


@pytest.fixture
def shard(tmp_path):
    path = str(tmp_path / "ckpt.safetensors")
    save_file({"w": np.arange(6, dtype="float32"), "b": np.ones(2, "int32")}, path)
    return path


def test_a_truncated_file_is_refused(shard):
    raw = open(shard, "rb").read()
    open(shard, "wb").write(raw[:-4])
    with pytest.raises(DamagedShardError, match="claims bytes"):
        read_arrays(shard)
    open(shard, "wb").write(raw[:5])
    with pytest.raises(DamagedShardError, match="too short"):
        read_arrays(shard)


def test_a_header_longer_than_the_file_is_refused(shard):
    raw = bytearray(open(shard, "rb").read())
    raw[:8] = struct.pack("<Q", 1 << 40)
    open(shard, "wb").write(bytes(raw))
    with pytest.raises(DamagedShardError, match="does not fit"):
        read_arrays(shard)


def test_offsets_that_disagree_with_the_shape_are_refused(shard):
    header, data = _header(shard)
    header["w"]["shape"] = [7]  # 28 bytes claimed over 24
    _write(shard, header, data)
    with pytest.raises(DamagedShardError, match="tensor w"):
        read_arrays(shard)
    header["w"]["shape"] = [6]
    header["w"]["data_offsets"] = [0, 10**9]
    _write(shard, header, data)
    with pytest.raises(DamagedShardError, match="tensor w"):
        read_arrays(shard)


def test_a_garbled_header_or_entry_is_refused(shard):
    header, data = _header(shard)
    raw = open(shard, "rb").read()
    (length,) = struct.unpack_from("<Q", raw)
    open(shard, "wb").write(raw[:8] + b"\xff" * length + raw[8 + length :])
    with pytest.raises(DamagedShardError, match="unreadable header"):
        read_arrays(shard)
    del header["w"]["data_offsets"]
    _write(shard, header, data)
    with pytest.raises(DamagedShardError, match="malformed"):
        read_arrays(shard)
    _write(shard, ["not", "an", "object"], data)  # type: ignore[arg-type]
    with pytest.raises(DamagedShardError, match="not a JSON object"):
        read_arrays(shard)


def test_an_unknown_dtype_is_named_as_damage(shard):
    header, data = _header(shard)
    header["w"]["dtype"] = "F8_E4M3"
    _write(shard, header, data)
    with pytest.raises(DamagedShardError, match="dtype 'F8_E4M3'"):
        read_arrays(shard)


@pytest.mark.parametrize("shape", [[-2, -3], [True, 6], [6.0], "6", [1 << 62, 0]])
def test_a_shape_that_is_no_list_of_sizes_is_refused(shard, shape):
    header, data = _header(shard)
    header["w"]["shape"] = shape
    _write(shard, header, data)
    with pytest.raises(DamagedShardError, match="tensor w"):
        read_arrays(shard)


def test_an_oversized_header_is_refused_before_it_is_read(shard):
    """Valid JSON, a few hundred KiB of it: parsing would cost tens of times that."""
    header, data = _header(shard)
    header["__metadata__"] = {f"k{i}": "v" for i in range(60_000)}
    _write(shard, header, data)
    tracemalloc.start()
    try:
        with pytest.raises(DamagedShardError, match="more than the"):
            read_arrays(shard, tensors=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 << 10  # neither read nor parsed
    assert sorted(read_arrays(shard, tensors=60_000)) == ["b", "w"]


def test_the_bytes_read_are_the_bytes_the_manifest_lists(shard):
    """Size and CRC32C are checked over the copy the tensors are views of."""
    raw = open(shard, "rb").read()
    entry = FileEntry(name="ckpt.safetensors", size=len(raw), crc32c=crc32c_bytes(raw))
    assert read_arrays(shard, entry=entry)["w"].tolist() == list(range(6))
    changed = bytearray(raw)
    changed[-1] ^= 0x40  # the last byte of b
    open(shard, "wb").write(bytes(changed))
    with pytest.raises(DamagedShardError, match="CRC32C .* manifest says"):
        read_arrays(shard, entry=entry)
    open(shard, "wb").write(raw + b"\0")
    with pytest.raises(DamagedShardError, match="bytes on the local disk"):
        read_arrays(shard, entry=entry)


def test_a_header_claiming_what_the_file_cannot_hold_is_refused_before_reading_it(
    tmp_path,
):
    """A 1 GiB file (sparse: no disk used) whose header claims more than it
    holds: refused from the header alone, the body never read into memory."""
    import tracemalloc

    path = str(tmp_path / "big.safetensors")
    header = {"w": {"dtype": "F32", "shape": [1 << 29], "data_offsets": [0, 1 << 31]}}
    _write(path, header, b"")
    with open(path, "r+b") as f:
        f.truncate(1 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(DamagedShardError, match="claims bytes"):
            read_arrays(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB held to refuse it"
