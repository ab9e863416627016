"""Only a state trained or restored in this process is ever committed.

An in-session recovery rebuilds the model in a fresh strategy scope and
restores it. If that restore fails or is interrupted, the rebuilt model is
untrained: it used to be committed as the newest checkpoint, under the step
the lost model had reached, and the next session resumed from it without a
word. These tests make the restore fail in the ways users meet, and check
that no checkpoint appears that was not there before the loss.

No TPU exists here: a ``tf.errors.UnavailableError`` raised from a callback
stands in for the lost accelerator, as in ``tests/test_agent_resume.py``.
Ctrl-C is a ``KeyboardInterrupt`` raised on the main thread; raising it from
the restore's own event puts that Ctrl-C at a chosen moment of the restore.
"""

from __future__ import annotations

import os

import pytest
import tensorflow as tf
from support.toy import at_step, tiny_fit_parts
from support.waiting import wait_for

import colab_resume as cr
from colab_resume.checkpoint import CheckpointManager
from colab_resume.checkpoint.errors import NoValidCheckpointError
from colab_resume.protocol.listing import RunListing
from colab_resume.storage import Storage

STEPS_PER_EPOCH = 8
LOSS_AT = 10  # steps 4 and 8 are committed by then


def committed_steps(run_dir: str) -> list[int]:
    return [d.name.step for d in RunListing.read(Storage(run_dir)).committed]


def damage_data_files(run_dir: str) -> None:
    """Flip bytes in every checkpoint data file (manifests stay as written)."""
    for folder, _, files in os.walk(os.path.join(run_dir, "checkpoints")):
        for name in files:
            if name != "MANIFEST.json":
                path = os.path.join(folder, name)
                with open(path, "r+b") as handle:
                    data = bytearray(handle.read())
                    data[len(data) // 2] ^= 0xFF
                    handle.seek(0)
                    handle.write(bytes(data))


def lose_accelerator_at(agent: cr.Agent, run_dir: str, damage: bool) -> object:
    seen: dict[str, list[int]] = {}

    def lose() -> None:
        manager = agent._loop.checkpoints  # internal: the run's checkpoints
        assert manager is not None
        manager.wait()
        seen["before"] = committed_steps(run_dir)
        if damage:
            damage_data_files(run_dir)
        raise tf.errors.UnavailableError(None, None, "TPU worker lost (test)")

    callback = at_step(LOSS_AT, lose)
    callback.seen_before = seen  # type: ignore[attr-defined]
    return callback


def fit(agent: cr.Agent, callback: object) -> None:
    build_model, data = tiny_fit_parts()
    agent.fit(
        build_model,
        lambda epoch: data,
        epochs=3,
        steps_per_epoch=STEPS_PER_EPOCH,
        callbacks=[callback],
        verbose=0,
    )


def agent_for(run_dir: str) -> cr.Agent:
    return cr.Agent(
        run_dir,
        save_every_steps=4,
        heartbeat_seconds=0.5,
        prefer="cpu",
        recovery_backoff_seconds=0.01,
    )


def test_a_failed_restore_during_recovery_commits_nothing(tmp_path):
    """Every checkpoint damaged when the accelerator goes: the recovery's
    restore finds none usable and raises; the untrained rebuilt model must not
    become the newest checkpoint (it did, as step 10)."""
    run_dir = str(tmp_path / "run")
    with agent_for(run_dir) as agent:
        callback = lose_accelerator_at(agent, run_dir, damage=True)
        with pytest.raises(NoValidCheckpointError):
            fit(agent, callback)
        assert agent.recoveries == 1  # the loss landed during training
    before = callback.seen_before["before"]  # type: ignore[attr-defined]
    assert before == [4, 8]
    assert committed_steps(run_dir) == before


def test_ctrl_c_while_the_recovery_restores_commits_nothing(tmp_path):
    """Ctrl-C in the middle of the recovery's restore (at its first damaged
    checkpoint): nothing is saved, and the message says so."""
    run_dir = str(tmp_path / "run")
    with agent_for(run_dir) as agent:
        callback = lose_accelerator_at(agent, run_dir, damage=True)

        def ctrl_c_at_damage(event: cr.Event) -> None:
            if event.kind == "checkpoint.damaged":
                raise KeyboardInterrupt

        agent.events.subscribe(ctrl_c_at_damage)
        with pytest.raises(KeyboardInterrupt) as interrupted:
            fit(agent, callback)
        assert agent.recoveries == 1
    assert "while building and restoring" in str(interrupted.value)
    assert "the checkpoint of step 8 is committed" in str(interrupted.value)
    assert committed_steps(run_dir) == [4, 8]


def test_a_second_fit_whose_restore_fails_does_not_save_the_first_fits_state(
    tmp_path,
):
    """The duties of an earlier ``fit`` on the same agent are not this one's:
    a restore that fails in a second call saves nothing either."""
    run_dir = str(tmp_path / "run")
    with agent_for(run_dir) as agent:
        build_model, data = tiny_fit_parts()
        agent.fit(build_model, lambda e: data, epochs=1, steps_per_epoch=8, verbose=0)
        assert committed_steps(run_dir) == [4, 8]
        damage_data_files(run_dir)
        with pytest.raises(NoValidCheckpointError):
            agent.fit(
                build_model, lambda e: data, epochs=2, steps_per_epoch=8, verbose=0
            )
    assert committed_steps(run_dir) == [4, 8]


@pytest.mark.parametrize("raised", [ValueError, KeyboardInterrupt])
def test_a_build_that_raises_while_the_checkpoint_prefetches_leaves_nothing(
    tmp_path, monkeypatch, raised
):
    """The newest checkpoint downloads while ``build_model()`` runs; a build
    that raises (or a Ctrl-C in it) once that download is under way commits
    nothing and leaves none of its files in the staging directory."""
    run_dir = str(tmp_path / "run")
    with agent_for(run_dir) as agent:
        build_model, data = tiny_fit_parts()
        agent.fit(build_model, lambda e: data, epochs=1, steps_per_epoch=8, verbose=0)
    assert committed_steps(run_dir) == [4, 8]

    # What the staging directory holds when the failed session's manager
    # closes (it deletes its own staging directory then, prefetch or not).
    left: list[list[str]] = []
    close = CheckpointManager.close

    def spying_close(manager: CheckpointManager) -> None:
        root = manager._staging_root  # internal: where downloads go
        left.append(sorted(os.listdir(root)) if os.path.isdir(root) else [])
        close(manager)

    monkeypatch.setattr(CheckpointManager, "close", spying_close)
    prefetching: list[str] = []

    def failing_build() -> object:
        manager = agent._loop.checkpoints  # internal: the session's manager
        assert manager is not None
        root = manager._staging_root

        def download_started() -> list[str]:
            return [d for d in os.listdir(root) if d.startswith("restore-")]

        prefetching.extend(wait_for(download_started, 60, "the prefetch"))
        raise raised("build_model failed (test)")

    with agent_for(run_dir) as agent:
        with pytest.raises(raised):
            agent.fit(
                failing_build, lambda e: data, epochs=2, steps_per_epoch=8, verbose=0
            )
    assert prefetching  # the build failed while the checkpoint downloaded
    assert left and all(not any(d in names for d in prefetching) for names in left)
    assert committed_steps(run_dir) == [4, 8]
