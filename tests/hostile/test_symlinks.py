"""A symlink inside a local run directory is refused, never followed.

With ``history/`` (or ``heartbeat/``, ``lease/``, ``checkpoints/``)
replaced by a link, every write of the agent landed wherever the link
pointed, and retention deleted files there. Storage now refuses any link
below the run directory (the run directory itself may be one) for every
read, write, listing and deletion, with an error naming the link and the
fix; readers report it instead of crashing.
"""

from __future__ import annotations

import pytest
from support.hostile import crashed, local_cli, stopped_run

from colab_resume.errors import CorruptRecordError, UnsafePathError
from colab_resume.heartbeat import RunSession, SessionOptions


@pytest.mark.parametrize("folder", ["history", "heartbeat", "lease", "checkpoints"])
def test_a_symlinked_protocol_folder_is_refused_for_writes_and_deletes(
    folder, tmp_path
):
    url = str(tmp_path / "run")
    storage = stopped_run(url, {})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.json").write_text("{}")
    link = tmp_path / "run" / folder
    if link.exists():
        for child in link.iterdir():
            child.unlink()
        link.rmdir()
    link.symlink_to(outside, target_is_directory=True)

    with pytest.raises(UnsafePathError) as caught:
        storage.write_json(f"{folder}/00000002.json", {"x": 1})
    assert f"{link} is a symbolic link" in str(caught.value)
    assert f"rm {link}" in str(caught.value)
    with pytest.raises(UnsafePathError):
        storage.delete(f"{folder}/victim.json")
    with pytest.raises(UnsafePathError):
        storage.put_file(str(outside / "victim.json"), f"{folder}/copy.json")
    with pytest.raises(UnsafePathError):
        storage.list(folder + "/")
    if folder in ("lease", "heartbeat"):
        with pytest.raises(UnsafePathError):
            RunSession.open(storage, SessionOptions(heartbeat_seconds=0.2))
    assert sorted(p.name for p in outside.iterdir()) == ["victim.json"]

    for args in (["status", url], ["ls", url]):
        result = local_cli(*args)
        assert not crashed(result), result.stderr
        assert result.returncode == 0 or str(link) in result.stderr, result.stderr


def test_a_symlinked_record_is_damage_and_never_written_through(tmp_path):
    url = str(tmp_path / "run")
    storage = stopped_run(url, {})
    target = tmp_path / "elsewhere.json"
    beat = tmp_path / "run" / "heartbeat" / "00000001.json"
    target.write_bytes(beat.read_bytes())
    beat.unlink()
    beat.symlink_to(target)

    with pytest.raises(CorruptRecordError, match="is a symbolic link"):
        storage.read_json("heartbeat/00000001.json")
    with pytest.raises(UnsafePathError):
        storage.write_json("heartbeat/00000001.json", {"x": 1})
    assert beat.is_symlink() and "session_id" in target.read_text()
    status = local_cli("status", url, "--json")
    assert status.returncode == 0 and not crashed(status), status.stderr
    assert "heartbeat/00000001.json is a symbolic link" in status.stdout


def test_the_run_directory_itself_may_be_a_link(tmp_path):
    (tmp_path / "disk").mkdir()
    (tmp_path / "run").symlink_to(tmp_path / "disk", target_is_directory=True)
    storage = stopped_run(str(tmp_path / "run"), {})
    assert storage.read_json("heartbeat/00000001.json")["lease"] == 1
    assert (tmp_path / "disk" / "lease" / "00000001.json").is_file()
