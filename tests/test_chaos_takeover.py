"""Ten takeover races between real processes: never two committers.

Each round starts three sessions at the same instant, all with
``takeover=True``, on a run that a previous round's winner still holds.
Create-only leases let exactly one win each number; the winner fences the
previous holder. Every "commit" (fence check, then a create-only write,
as the checkpoint manager does) is logged with the time of its fence
check, and the test checks that each commit's fence check happened
before the next lease existed (by the storage server's timestamps), and
that a fenced session commits nothing afterwards.
"""

from __future__ import annotations

import json
import time

from support import Process, worker

from colab_resume.listing import RunListing, read_leases
from colab_resume.storage import Storage

ROUNDS, RACERS = 10, 3


def test_ten_takeover_races_never_two_committers(
    gcs_run_dir, gcs_options, emulator, tmp_path
):
    log = tmp_path / "commits.jsonl"
    storage = Storage(gcs_run_dir, gcs_options)
    running: list[Process] = []
    winners = 0
    for _ in range(ROUNDS):
        start_at = time.time() + 1.5  # enough for the racers to import
        racers = [
            worker(
                "race_committer",
                gcs_run_dir,
                *("--endpoint", emulator.url, "--start-at", str(start_at)),
                *("--log", str(log), "--seconds", "3"),
            )
            for _ in range(RACERS)
        ]
        running += racers
        time.sleep(2.5)  # the race is decided; the winner commits on
    outputs = [proc.finish(expect_rc=None, timeout=60).stdout for proc in running]
    won = [o for o in outputs if o.startswith("WON")]
    winners = len(won)
    leases = {number: info.updated for number, info in read_leases(storage)}
    # Exactly one winner per lease number, and every number was won once.
    assert sorted(int(o.split()[1]) for o in won) == sorted(leases)
    assert winners >= ROUNDS  # each round produced at least one new holder

    records = [json.loads(line) for line in log.read_text().splitlines()]
    commits = [r for r in records if "path" in r]
    assert commits
    # Each commit's fence check ran while its lease was still the newest.
    late = [
        c
        for c in commits
        if c["lease"] + 1 in leases and c["checked"] >= leases[c["lease"] + 1]
    ]
    assert not late, late
    # A session that saw itself fenced never committed afterwards.
    fenced_at = {r["lease"]: r["fenced_at"] for r in records if "fenced_at" in r}
    assert fenced_at  # fencing really happened
    after = [c for c in commits if c["checked"] > fenced_at.get(c["lease"], 1e18)]
    assert not after, after
    # And every superseded holder that was still running got fenced.
    assert len(fenced_at) >= ROUNDS - 1


def test_a_manifest_landing_after_the_next_lease_is_not_committed(
    gcs_run_dir, gcs_options
):
    """The window between a holder's fence check and its manifest write.

    Lease 1 passes its fence check, lease 2 is taken (and restores step 10),
    then lease 1's manifest for step 20 lands. By the server's clock that
    manifest is younger than lease 2: it must not count as committed, so no
    later restore can pick up the fenced session's work, and retention
    removes it as a leftover.
    """
    from colab_resume import rundir
    from colab_resume.checkpoint import retention
    from colab_resume.heartbeat import RunSession, SessionOptions, read_status

    storage = Storage(gcs_run_dir, gcs_options)
    first = RunSession.open(storage, SessionOptions(heartbeat_seconds=60))
    on_time = rundir.CheckpointName(step=10, lease=1)
    storage.write_bytes(f"{on_time.path}/ckpt.data", b"x")
    first.fence()
    storage.write_json(on_time.manifest_path, {"step": 10})
    late = rundir.CheckpointName(step=20, lease=1)
    storage.write_bytes(f"{late.path}/ckpt.data", b"x")
    first.fence()  # passes: lease 2 does not exist yet
    second = RunSession.open(
        storage, SessionOptions(heartbeat_seconds=60, takeover=True)
    )
    storage.write_json(late.manifest_path, {"step": 20})  # lands after lease 2

    dirs = {d.name: d for d in RunListing.read(storage).checkpoints}
    assert dirs[on_time].committed
    assert not dirs[late].committed and dirs[late].committed_late
    assert read_status(storage).checkpoint_step == 10
    doomed = retention.plan(list(dirs.values()), keep=3, keep_every_steps=None, lease=2)
    assert [d.name for d in doomed] == [late]
    second.close()
    first.close()
