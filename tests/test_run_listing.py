"""The run directory is listed once per operation, and judged by one commit rule.

The storage is a real :class:`Storage` on a local run directory whose
``list`` counts its calls; ``list`` is the only method that lists (gcsfs
``find``), so a count of it is a count of listing requests on GCS.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import io
import os
import pathlib

import pytest

import colab_resume
from colab_resume import cli
from colab_resume.cli import common
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.protocol import commit, rundir
from colab_resume.protocol.listing import RunListing
from colab_resume.protocol.objects import OBJECT_DIR
from colab_resume.storage import ObjectInfo, Storage


class CountingStorage(Storage):
    """A Storage that records the prefix of every listing it makes."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.listed: collections.Counter[str] = collections.Counter()

    def list(self, prefix: str = ""):
        self.listed[prefix] += 1
        return super().list(prefix)


@pytest.fixture
def run_dir(tmp_path) -> str:
    """Two stopped sessions, committed checkpoints and a leftover upload."""
    url = str(tmp_path / "run")
    storage = Storage(url)
    for lease, steps in ((1, (100, 200)), (2, (300,))):
        RunSession.open(storage, SessionOptions(heartbeat_seconds=5)).close("stopped")
        for step in steps:
            name = rundir.CheckpointName(step=step, lease=lease)
            storage.write_bytes(f"{name.path}/ckpt.data", b"x" * 10)
            storage.write_json(name.manifest_path, {"step": step})
    storage.write_bytes(f"{rundir.CheckpointName(400, 2).path}/ckpt.data", b"x")
    # File stamps are coarse (a clock tick): put lease 1's manifests surely
    # before lease 2, or a tie would rightly make them uncommitted.
    taken = os.stat(os.path.join(url, rundir.lease_path(2))).st_mtime - 1
    for step in (100, 200):
        manifest = rundir.CheckpointName(step=step, lease=1).manifest_path
        os.utime(os.path.join(url, manifest), (taken, taken))
    return url


def listings(
    monkeypatch, run_dir: str, *argv: str, rc: int = 0
) -> collections.Counter[str]:
    """Run ``colab-resume ARGV RUN_DIR``; the prefixes it listed, with counts."""
    storage = CountingStorage(run_dir)
    monkeypatch.setattr(common, "open_run_dir", lambda args: storage)
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main([argv[0], run_dir, *argv[1:]]) == rc
    return storage.listed


def test_status_lists_leases_and_checkpoints_once(monkeypatch, run_dir):
    # Two prefixes, not the whole run directory: history/ grows with the run
    # and a status poll should not pay for it (nor fail when it is stuffed).
    assert listings(monkeypatch, run_dir, "status", "--brief") == {
        rundir.LEASE_DIR + "/": 1,
        rundir.CHECKPOINT_DIR: 1,
    }
    # The goodput line reads the beats and the history once more, and the
    # verdict's listing is shared with it.
    assert listings(monkeypatch, run_dir, "status") == {
        rundir.LEASE_DIR + "/": 1,
        rundir.CHECKPOINT_DIR: 1,
        rundir.HEARTBEAT_DIR + "/": 1,
        "history/": 1,
    }


def test_prune_lists_leases_checkpoints_and_objects_once(monkeypatch, run_dir):
    # The shared objects (objects/) are listed once too: a prune keeps those
    # a kept checkpoint references and collects the others.
    once = {rundir.LEASE_DIR + "/": 1, rundir.CHECKPOINT_DIR: 1, OBJECT_DIR + "/": 1}
    listed = listings(monkeypatch, run_dir, "prune", "--keep", "1", "--dry-run")
    assert listed == once
    # A real prune deletes from that same listing; it lists nothing more.
    listed = listings(monkeypatch, run_dir, "prune", "--keep", "1")
    assert listed == once
    assert [o.path for o in Storage(run_dir).list(rundir.CHECKPOINT_DIR)] == [
        "checkpoints/step-000000300.e00000002/MANIFEST.json",
        "checkpoints/step-000000300.e00000002/ckpt.data",
    ]


def test_ls_lists_the_whole_run_directory_once(monkeypatch, run_dir):
    # ls shows every part of the run directory, so one listing of all of it.
    assert listings(monkeypatch, run_dir, "ls", "--json") == {"": 1}


def test_watch_lists_once_per_poll(monkeypatch, run_dir):
    # The holder stopped cleanly: STOPPED at the first poll, exit code 5.
    listed = listings(monkeypatch, run_dir, "watch", "--interval", "1", rc=5)
    assert listed == {rundir.LEASE_DIR + "/": 1, rundir.CHECKPOINT_DIR: 1}


def test_ls_and_status_agree_with_the_listing(run_dir):
    listing = RunListing.read(Storage(run_dir))
    assert listing.lease == 2 and [n for n, _ in listing.leases] == [1, 2]
    assert [d.name.step for d in listing.committed] == [100, 200, 300]
    assert listing.committed_step == 300
    assert RunListing.from_objects(run_dir, Storage(run_dir).list()) == listing


# --- the commit rule -----------------------------------------------------------


def _info(updated: float) -> ObjectInfo:
    return ObjectInfo(rundir.MANIFEST, 1, updated)


@pytest.mark.parametrize(
    "manifest, next_lease, expected",
    [
        (None, None, commit.UNCOMMITTED),
        (None, 5.0, commit.UNCOMMITTED),
        (_info(4.0), None, commit.COMMITTED),
        (_info(4.0), 5.0, commit.COMMITTED),  # stored before the next lease
        (_info(5.0), 5.0, commit.FENCED),  # a tie proves nothing: late
        (_info(6.0), 5.0, commit.FENCED),
    ],
)
def test_commit_rule(manifest, next_lease, expected):
    assert commit.judge(manifest, next_lease) == expected


def test_the_manifest_is_deleted_first():
    names = ["ckpt.index", rundir.MANIFEST, "ckpt.data-00000-of-00001"]
    assert commit.deletion_order(names) == [
        rundir.MANIFEST,
        "ckpt.data-00000-of-00001",
        "ckpt.index",
    ]
    assert commit.deletion_order(["b", "a"]) == ["a", "b"]


# --- dependencies point down ---------------------------------------------------


def _imports(module_file: pathlib.Path) -> set[str]:
    tree = ast.parse(module_file.read_text())
    names = set()
    for node in ast.walk(tree):  # lazy imports inside functions count too
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    "files, forbidden",
    [
        ("heartbeat/*.py", ("colab_resume.checkpoint",)),
        # The protocol package is the spec: it reads what the storage layer
        # lists and stands below everything that acts on it.
        (
            "protocol/*.py",
            (
                "colab_resume.checkpoint",
                "colab_resume.heartbeat",
                "colab_resume.agent",
                "colab_resume.backend",
            ),
        ),
    ],
)
def test_the_protocol_sits_below_heartbeat_and_checkpoint(files, forbidden):
    package = pathlib.Path(colab_resume.__file__).parent
    paths = sorted(package.glob(files))
    assert paths
    for path in paths:
        bad = [n for n in _imports(path) if n.startswith(forbidden)]
        assert not bad, f"{path.name} imports {bad}"
