"""Restore verifies while it downloads: no metadata request per file.

Through the fault proxy, which records every request, against the GCS
emulator: a restore lists the run directory, reads the manifest and then
makes exactly one media download per checkpoint file. Sizes and CRC32Cs
come from the listing and are computed as the bytes stream in, so damage
is still caught — on the server (the listing's CRC32C differs from the
manifest's) and in transit (the proxy inverts a byte of a download whose
length stays right).
"""

from __future__ import annotations

import urllib.parse

import numpy as np
import pytest
import tensorflow as tf
from support.checkpoints import is_data_file
from support.faultproxy import FaultMix, FaultProxy, Seen, path_contains

from colab_resume.checkpoint import CheckpointManager
from colab_resume.events import EventLog
from colab_resume.protocol.rundir import CheckpointName
from colab_resume.storage import Storage


def make_state(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    # Three variables of 1 MiB: with 1 MiB shards, three data files.
    return {
        name: tf.Variable(rng.standard_normal((512, 512)).astype("float32"))
        for name in ("w", "u", "v")
    }


@pytest.fixture
def proxy(emulator):
    with FaultProxy(emulator.url) as p:
        yield p


@pytest.fixture
def saved(proxy, gcs_run_dir, tmp_path):
    """A run with checkpoints at steps 1 and 2 (each a few files), via the proxy."""
    storage = Storage(gcs_run_dir, {"token": "anon", "endpoint_url": proxy.url})
    manager = CheckpointManager(
        storage,
        lease=1,
        fence=lambda: None,
        events=EventLog(),
        keep=5,
        staging_dir=str(tmp_path / "staging"),
        shard_bytes=1 << 20,
    )
    for step in (1, 2):
        manager.save(make_state(step), step=step, epoch=0)
        manager.wait()
        manager.check()
    manager.close()
    return storage


def _restore(
    storage: Storage, tmp_path, *, prefetched: bool = False
) -> tuple[object, EventLog, dict]:
    events = EventLog()
    manager = CheckpointManager(
        storage,
        lease=2,
        fence=lambda: None,
        events=events,
        staging_dir=str(tmp_path / "restore"),
    )
    prefetch = manager.prefetch() if prefetched else None
    fresh = make_state(99)
    info = manager.restore(fresh, prefetch=prefetch)
    manager.close()
    return info, events, fresh


def _checkpoint_requests(seen: list[Seen]) -> tuple[list[str], list[str]]:
    """(object metadata requests, media downloads) for checkpoint objects."""
    metadata, media = [], []
    for request in seen:
        path = urllib.parse.unquote(request.path)
        if "/o/" not in path or "checkpoints/step-" not in path:
            continue
        name = path.split("/o/", 1)[1].split("?", 1)[0]
        if request.method == "GET" and "alt=media" in path:
            media.append(name)
        elif request.method in ("GET", "HEAD"):
            metadata.append(name)
    return metadata, media


@pytest.mark.parametrize("prefetched", [False, True], ids=["now", "prefetched"])
def test_restore_makes_one_request_per_file_and_no_metadata_requests(
    saved, proxy, tmp_path, prefetched
):
    files = [i for i in saved.list(CheckpointName(2, 1).path)]
    assert len(files) >= 4  # manifest, index and data shards
    proxy.seen.clear()
    info, _, fresh = _restore(saved, tmp_path, prefetched=prefetched)
    assert info.step == 2
    assert np.array_equal(fresh["w"].numpy(), make_state(2)["w"].numpy())
    metadata, media = _checkpoint_requests(proxy.seen)
    assert metadata == []
    # Each file once (the manifest is one of them), nothing of step 1.
    assert sorted(media) == sorted(saved.full(i.path).split("/", 1)[1] for i in files)
    assert set(info.seconds) == {"list", "verify", "download", "read"}


@pytest.mark.parametrize("prefetched", [False, True], ids=["now", "prefetched"])
def test_bytes_damaged_in_transit_are_caught_while_streaming(
    saved, proxy, tmp_path, prefetched
):
    """Also when the damaged download is the prefetch's, made before the
    state was built: the same fallback to the previous checkpoint."""
    data = sorted(
        i.path for i in saved.list(CheckpointName(2, 1).path) if is_data_file(i.path)
    )[0]
    proxy.seen.clear()
    proxy.set_mix(FaultMix(corrupt_rate=1.0, match=path_contains(data, "GET")))
    info, events, fresh = _restore(saved, tmp_path, prefetched=prefetched)
    assert proxy.counts["corrupt"] >= 1
    assert info.step == 1  # fell back: the newest did not verify
    assert np.array_equal(fresh["w"].numpy(), make_state(1)["w"].numpy())
    (warning,) = events.recent(kind="checkpoint.damaged")
    assert data.rsplit("/", 1)[1] in warning.message
    assert "corrupted" in warning.message
    metadata, _ = _checkpoint_requests(proxy.seen)
    assert metadata == []


def test_a_shard_damaged_on_the_server_same_size_is_caught_without_a_download(
    saved, proxy, tmp_path
):
    data = sorted(
        i.path for i in saved.list(CheckpointName(2, 1).path) if is_data_file(i.path)
    )[0]
    body = bytearray(saved.read_bytes(data))
    body[len(body) // 3] ^= 0x01  # same size: only a checksum can tell
    saved.write_bytes(data, bytes(body))
    proxy.seen.clear()
    info, events, _ = _restore(saved, tmp_path)
    assert info.step == 1
    assert "corrupted" in events.recent(kind="checkpoint.damaged")[0].message
    metadata, media = _checkpoint_requests(proxy.seen)
    assert metadata == []
    # The listing's CRC32C gave it away: no file of step 2 but its manifest
    # was downloaded.
    step2 = [m for m in media if CheckpointName(2, 1).dirname in m]
    assert [m.rsplit("/", 1)[1] for m in step2] == ["MANIFEST.json"]
