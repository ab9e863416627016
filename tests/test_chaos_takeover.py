"""Ten takeover races between real processes: never two committers.

Each round lines three sessions up on a start line (support.starting), all
with ``takeover=True``, on a run that a previous round's winner still holds.
Create-only leases let exactly one win each number; the winner fences the
previous holder. Every "commit" (fence check, then a create-only write,
as the checkpoint manager does) is logged with the time of its fence
check, and the test checks that each commit's fence check happened
before the next lease existed (by the storage server's timestamps), and
that a fenced session commits nothing afterwards.

Nothing here is timed: a round starts when every racer is ready, and ends
when each has won or lost and each winner has committed (or been fenced
already). Winners hold the run until fenced, so every superseded holder
was running when superseded and must have been fenced, however slowly the
machine runs.
"""

from __future__ import annotations

import json

import pytest
from support import Process, worker
from support.starting import start_together

from colab_resume.protocol.listing import RunListing, read_leases
from colab_resume.storage import Storage

ROUNDS, RACERS = 10, 3


@pytest.fixture(params=["gs", "gdrive"])
def race_target(request) -> tuple[str, dict, str]:
    """(run_dir, storage options, endpoint) on the GCS or the Drive emulator."""
    if request.param == "gdrive":
        options = request.getfixturevalue("drive_options")
        return (
            request.getfixturevalue("drive_run_dir"),
            options,
            options["endpoint_url"],
        )
    options = request.getfixturevalue("gcs_options")
    return request.getfixturevalue("gcs_run_dir"), options, options["endpoint_url"]


def test_ten_takeover_races_never_two_committers(race_target, tmp_path):
    """Drive too: its lease race is the conditional update of the run index."""
    gcs_run_dir, gcs_options, endpoint = race_target
    log = tmp_path / "commits.jsonl"
    storage = Storage(gcs_run_dir, gcs_options)
    holders: dict[int, Process] = {}
    losers: list[Process] = []
    try:
        for round_number in range(ROUNDS):
            go = tmp_path / f"go-{round_number}"
            racers = [
                worker(
                    "race_committer",
                    gcs_run_dir,
                    *("--endpoint", endpoint, "--go", str(go)),
                    *("--log", str(log)),
                )
                for _ in range(RACERS)
            ]
            start_together(racers, go)
            for racer in racers:
                outcome = racer.expect("", timeout=120)
                if outcome.startswith("WON"):
                    holders[int(outcome.split()[1])] = racer
                else:
                    assert outcome == "LOST", outcome
                    losers.append(racer)
            # The round is decided; its winners commit (or were fenced by a
            # winner of the same round) before the next round races them.
            round_winners = [p for p in holders.values() if p in racers]
            assert round_winners, f"round {round_number}: no racer won"
            for holder in round_winners:
                assert holder.expect("", timeout=120) in ("COMMITTED", "FENCED")
        newest = max(holders)
        superseded = {
            n: p.finish(timeout=120) for n, p in holders.items() if n != newest
        }
        for loser in losers:
            loser.finish(timeout=120)
    finally:
        for proc in [*holders.values(), *losers]:
            proc.kill()
    leases = {number: info.updated for number, info in read_leases(storage)}
    # Exactly one winner per lease number, and every number was won once.
    assert sorted(holders) == sorted(leases)
    assert len(holders) >= ROUNDS  # each round produced at least one new holder
    # Every holder but the newest was superseded while running: all fenced.
    unfenced = [n for n, r in superseded.items() if "FENCED" not in r.stdout]
    assert not unfenced, {n: str(superseded[n]) for n in unfenced}

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
    assert sorted(fenced_at) == sorted(superseded)
    after = [c for c in commits if c["checked"] > fenced_at.get(c["lease"], 1e18)]
    assert not after, after


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
    from colab_resume.checkpoint import retention
    from colab_resume.heartbeat import RunSession, SessionOptions, read_status
    from colab_resume.protocol import rundir

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
