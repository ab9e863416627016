"""A lease number no session makes is refused by name, not taken past.

One empty ``lease/99999999.json`` used to make the next session take lease
100000000: a nine-digit name that no reader parsed, so its checkpoints
(``.e100000000``) were invisible to every restore and listing.
"""

from __future__ import annotations

import pytest
from hostile_tools import cli, crashed, stopped_run

from colab_resume.errors import CorruptRecordError
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.listing import read_leases


@pytest.mark.parametrize("name", ["99999999.json", "100000000.json", "5000.json"])
def test_absurd_lease_number_is_refused_naming_the_object(
    name, gcs_run_dir, gcs_options, emulator
):
    storage = stopped_run(gcs_run_dir, gcs_options)
    storage.write_bytes(f"lease/{name}", b"")

    with pytest.raises(CorruptRecordError) as caught:
        RunSession.open(storage, SessionOptions(heartbeat_seconds=0.2))
    assert f"delete {gcs_run_dir}/lease/{name}" in str(caught.value)
    status = cli(emulator, "status", gcs_run_dir)
    assert status.returncode == 1 and not crashed(status), status.stderr
    assert f"lease/{name}" in status.stderr

    # The fix the message gives works.
    storage.delete(f"lease/{name}")
    assert [number for number, _ in read_leases(storage)] == [1]
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=0.2))
    assert session.lease == 2
    session.close()


def test_lease_names_of_any_width_are_read(gcs_run_dir, gcs_options):
    """A lease written with another width still counts: the next one is above it."""
    storage = stopped_run(gcs_run_dir, gcs_options)
    storage.write_bytes("lease/7.json", b"")  # damaged, but a number
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=0.2))
    assert session.lease == 8
    session.close()
