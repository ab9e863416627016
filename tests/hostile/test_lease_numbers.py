"""What counts as a lease, and what fences a holder: one rule for everyone.

One empty ``lease/99999999.json`` used to make the next session take lease
100000000: a nine-digit name that no reader parsed, so its checkpoints
(``.e100000000``) were invisible to every restore and listing. Then one
planted object with an odd number (``lease/00000003.json`` while lease 1
trains, ``lease/2.json``, ``lease/３.json``) let a second session take the
run while the holder, checking only the next eight-digit name, was never
fenced: both trained and committed.
"""

from __future__ import annotations

import pytest
from support.hostile import cli, crashed, stopped_run, wait_for

from colab_resume.errors import CorruptRecordError, FencedError
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.protocol import commit, rundir
from colab_resume.protocol.listing import RunListing, read_leases
from colab_resume.storage import Storage


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


def _run_dirs(request, tmp_path) -> tuple[str, dict]:
    if request.param == "local":
        return str(tmp_path / "run"), {}
    return request.getfixturevalue("gcs_run_dir"), request.getfixturevalue(
        "gcs_options"
    )


@pytest.fixture(params=["local", "gcs"])
def run_dir(request, tmp_path) -> tuple[str, dict]:
    """The same attack on a local run directory and on the GCS emulator."""
    return _run_dirs(request, tmp_path)


@pytest.mark.parametrize(
    "name", ["7.json", "2.json", "\uff13.json", "0000000\uff13.json"]
)
def test_a_name_of_another_width_or_script_is_refused_and_fences_the_holder(
    name, run_dir
):
    """``lease/2.json`` or ``lease/３.json`` while lease 1 trains: no reader
    may count it as a lease a writer does not (two sessions used to train)."""
    url, options = run_dir
    storage = Storage(url, options)
    holder = RunSession.open(storage, SessionOptions(heartbeat_seconds=0.2))
    storage.write_bytes(f"lease/{name}", b"")

    with pytest.raises(CorruptRecordError) as caught:
        RunSession.open(storage, SessionOptions(heartbeat_seconds=0.2, takeover=True))
    assert f"delete {url}/lease/{name}" in str(caught.value)
    with pytest.raises(FencedError):
        holder.fence()  # the holder stops writing too: one rule for both
    holder.close("fenced")

    storage.delete(f"lease/{name}")  # the fix the message gives works
    assert [number for number, _ in read_leases(storage)] == [1]


def test_a_lease_planted_above_the_next_number_fences_the_holder(run_dir):
    """An empty ``lease/00000003.json`` while lease 1 trains: the next session
    takes 4, and lease 1 must be fenced by it although ``lease/00000002.json``
    never exists (the holder used to check only that name)."""
    url, options = run_dir
    storage = Storage(url, options)
    holder = RunSession.open(storage, SessionOptions(heartbeat_seconds=0.2))
    storage.write_bytes("lease/00000003.json", b"")
    with pytest.raises(FencedError) as fenced:
        holder.fence()
    assert "lease 3" in str(fenced.value)
    holder.close("fenced")

    successor = RunSession.open(
        storage, SessionOptions(heartbeat_seconds=0.2, takeover=True)
    )
    assert successor.lease == 4
    successor.close("stopped")


def test_a_manifest_after_any_higher_lease_is_not_committed(run_dir):
    """The commit rule reads the same leases: lease 1's manifest stored after
    a planted lease 3 counts as late, though there is no lease 2."""
    url, options = run_dir
    storage = Storage(url, options)
    RunSession.open(storage, SessionOptions(heartbeat_seconds=5)).close("stopped")
    storage.write_bytes("checkpoints/step-000000010.e00000001/MANIFEST.json", b"{}")
    wait_for(lambda: _stamped_after(storage, _manifest_time(storage)))
    storage.write_bytes("lease/00000003.json", b"")
    storage.write_bytes("checkpoints/step-000000020.e00000001/MANIFEST.json", b"{}")

    states = {d.name.step: d.state for d in RunListing.read(storage).checkpoints}
    assert states == {10: commit.COMMITTED, 20: commit.FENCED}


def _manifest_time(storage: Storage) -> float:
    return storage.info("checkpoints/step-000000010.e00000001/MANIFEST.json").updated


def _stamped_after(storage: Storage, stamp: float) -> bool:
    """Whether an object written now gets a later stamp (the storage's clock)."""
    storage.write_bytes("probe", b"")
    return storage.info("probe").updated > stamp


def test_parse_lease_name_takes_eight_ascii_digits_only():
    assert rundir.parse_lease_name("00000007.json") == 7
    for name in (
        "7.json",
        "000000007.json",
        "\uff17.json",
        "0000000\uff17.json",
        "00000000.json",
        "00000007.json\n",
        "00000007.JSON",
        "x/00000007.json",
    ):
        assert rundir.parse_lease_name(name) is None, name
