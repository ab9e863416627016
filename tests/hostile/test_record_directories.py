"""A directory where a record belongs is damage, and never a record.

Sessions create records as files, atomically: no session makes
``lease/00000002.json/``. The rule is the one GCS gives for free, where a
"folder" is a prefix and not an object: a directory is not a record. So
it fences nobody (the live holder of lease 1 keeps the run, as it would
beside the directory's GCS twin) and no reader parses it.

A damaged lease *file* is different: it holds its number, so readers
judge it (dead after the default 120 s) and the next session takes the
number above it, which fences everyone below. A directory cannot be
stepped over like that: lease 3 would not fence holder 1, which checks
for lease 2 only (docs/DESIGN.md §4). So, like an absurd lease number, it is
refused by name: ``ls`` reports it, and a session that needs lease 2
raises CorruptRecordError naming the directory and the command that
removes it, instead of a LeaseRaceError ("another session took lease 2
at the same moment") on every try, for ever. The fix works: the session
then takes lease 2 and fences holder 1.
"""

from __future__ import annotations

import json
import shutil

import pytest
from support.hostile import crashed, local_cli, stopped_run, wait_for

from colab_resume.errors import CorruptRecordError
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.storage import Storage


def test_a_directory_in_place_of_the_next_lease_fences_nobody(tmp_path):
    url = str(tmp_path / "run")
    options = SessionOptions(heartbeat_seconds=0.2, dead_after_seconds=5)
    holder = RunSession.open(Storage(url), options)
    blocker = tmp_path / "run" / "lease" / "00000002.json"
    blocker.mkdir()

    beats = holder.writer.beats
    wait_for(lambda: holder.writer.beats >= beats + 3)
    assert not holder.writer.fenced
    holder.fence()  # the check before a commit agrees

    status = local_cli("status", url, "--json")
    assert status.returncode == 0 and not crashed(status), status.stderr
    judged = json.loads(status.stdout)
    assert (judged["state"], judged["lease"]) == ("ALIVE", 1), judged
    listing = local_cli("ls", url)
    assert listing.returncode == 0 and not crashed(listing), listing.stderr
    assert f"2  UNREADABLE: {blocker} is a directory" in listing.stdout
    assert f"rm -r {blocker}" in listing.stdout

    taking = SessionOptions(heartbeat_seconds=0.2, takeover=True)
    with pytest.raises(CorruptRecordError) as caught:
        RunSession.open(Storage(url), taking)
    assert f"rm -r {blocker}" in str(caught.value)
    assert not holder.writer.fenced  # the refused session wrote nothing

    shutil.rmtree(blocker)  # the fix the message gives
    session = RunSession.open(Storage(url), taking)
    assert session.lease == 2
    wait_for(lambda: holder.writer.fenced)
    session.close()
    holder.close()


def test_directories_in_place_of_records_are_reported_not_crashed_on(tmp_path):
    url = str(tmp_path / "run")
    stopped_run(url, {})
    for record in ("heartbeat/00000001.json", "run.json"):
        (tmp_path / "run" / record).unlink()
        (tmp_path / "run" / record).mkdir()

    status = local_cli("status", url, "--json")
    assert status.returncode == 0 and not crashed(status), status.stderr
    detail = json.loads(status.stdout)["detail"]
    assert "heartbeat/00000001.json is a directory" in detail
    listing = local_cli("ls", url)
    assert listing.returncode == 0 and not crashed(listing), listing.stderr
    assert "run.json  UNREADABLE" in listing.stdout
    assert "heartbeat UNREADABLE" in listing.stdout
    watch = local_cli("watch", url, "--interval", "0.2", "--dead-after", "0.5")
    assert watch.returncode == 3 and not crashed(watch), watch.stderr  # DEAD

    # run.json is the run's identity: a directory there is refused by name.
    with pytest.raises(CorruptRecordError, match="run.json is a directory"):
        RunSession.open(Storage(url), SessionOptions(heartbeat_seconds=0.2))
