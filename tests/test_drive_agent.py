"""An agent on a Drive run directory, end to end, on the Drive API emulator.

A real training process (tests/workers/agent_worker.py: Keras on
TensorFlow, 2 CPU replicas, op determinism) is SIGKILLed at a random step,
and a second one resumes from Drive: its variables must equal an
uninterrupted run's bit for bit. Then the CLI answers about that run
(``status``, ``watch``, ``ls``, ``report``, ``prune``) in a process of its
own, as from a laptop, and the monitor notebook's panel reads it.
"""

from __future__ import annotations

import json
import random

import numpy as np
from support import assert_bitwise_equal as assert_same_bits
from support import run_cli, steps_here, train_agent

import colab_resume as cr
from colab_resume.protocol import rundir
from colab_resume.storage import Storage

TOTAL_STEPS = 36  # 3 epochs x 12 steps, a checkpoint every 5
SAVE_EVERY = 5


# The agent worker, run and awaited (one helper for both suites).
train = train_agent


def test_fit_killed_at_a_random_step_resumes_bitwise_from_drive(
    drive_run_dir, drive_emulator, drive_options, tmp_path
) -> None:
    reference = str(tmp_path / "reference.npz")
    assert steps_here(train(str(tmp_path / "local-run"), reference)) == TOTAL_STEPS

    kill_at = random.Random().randint(2, TOTAL_STEPS - 2)
    print(f"killing at step {kill_at}")  # shown on failure: the draw to replay
    out = str(tmp_path / "w.npz")
    killed = train(
        drive_run_dir,
        out,
        *("--kill-at-step", str(kill_at), "--heartbeat-seconds", "10"),
        endpoint=drive_emulator.url,
        expect_rc=-9,
    )
    # The kill landed during training, at the drawn step.
    assert f"KILLING at step {kill_at}" in killed.stdout
    assert "DONE" not in killed.stdout
    resumed = train(drive_run_dir, out, endpoint=drive_emulator.url)
    # From the newest checkpoint committed before the kill (a kill at a save
    # step lands while that one uploads: then the one before).
    newest = kill_at // SAVE_EVERY * SAVE_EVERY
    assert steps_here(resumed) in (
        TOTAL_STEPS - newest,
        TOTAL_STEPS - newest + SAVE_EVERY,
    )
    assert_same_bits(reference, out, must_contain=["seed_generator"])
    assert any("adam" in name.lower() for name in np.load(out).files)

    # The CLI, in its own process, with the emulator's endpoint and token.
    flags = ["--endpoint-url", drive_emulator.url, "--token", drive_options["token"]]
    status = run_cli("status", drive_run_dir, "--json", *flags)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "COMPLETED"
    watched = run_cli("watch", drive_run_dir, "--interval", "0.2", *flags)
    assert watched.returncode == 0 and "COMPLETED" in watched.stdout, watched.stderr
    monitor = cr.panel(drive_run_dir, drive_options)  # the monitor notebook's panel
    assert "completed" in monitor.badge.value
    assert "run.completed" in monitor.events.value
    listing = run_cli("ls", drive_run_dir, "--json", *flags)
    assert listing.returncode == 0, listing.stderr
    checkpoints = json.loads(listing.stdout)["checkpoints"]
    assert sum(c["committed"] for c in checkpoints) >= 2
    picture = tmp_path / "report.png"
    drawn = run_cli("report", drive_run_dir, "-o", str(picture), *flags, timeout=120)
    assert drawn.returncode == 0, drawn.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # both sessions' history
    pruned = run_cli("prune", drive_run_dir, "--keep", "1", *flags)
    assert pruned.returncode == 0, pruned.stderr
    storage = Storage(drive_run_dir, drive_options)
    left = {o.path.split("/")[1] for o in storage.list(rundir.CHECKPOINT_DIR)}
    assert len(left) == 1, left
    # Deleted for good: no file of a pruned checkpoint is left in the folder.
    store = storage.store
    folder = store._run_folder(create=False, timeout=10)  # type: ignore[attr-defined]
    names = {
        raw["name"]
        for raw in store.api.children(  # type: ignore[attr-defined]
            f"'{folder}' in parents", "id,name", timeout=10
        )
    }
    assert {n.split("/")[1] for n in names if n.startswith("checkpoints/")} == left


def test_a_full_drive_stops_the_run_naming_its_newest_checkpoint(
    drive_run_dir, drive_emulator
) -> None:
    """Drive answers every upload with 403 ``storageQuotaExceeded`` (through
    the fault proxy: the emulator has no quota) once the run has committed a
    checkpoint: ``fit`` stops with ``StorageFullError``, saying why, what to
    free and which checkpoint the next run continues from."""
    import keras
    import pytest
    import tensorflow as tf
    from support.faultproxy import FaultMix, FaultProxy, path_contains

    import colab_resume as cr
    from colab_resume.errors import StorageFullError

    def build():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        return model

    x = np.arange(64 * 4, dtype="float32").reshape(64, 4) / 256.0

    def make_dataset(epoch, skip=0):
        data = tf.data.Dataset.from_tensor_slices((x, x[:, :1]))
        return data.batch(4).skip(skip)

    with FaultProxy(drive_emulator.url) as proxy:
        agent = cr.Agent(
            drive_run_dir,
            storage_options=drive_emulator.options(proxy.url),
            save_every_steps=4,
            prefer="cpu",
            storage_retry_seconds=5,
        )

        full_after: list[int] = []

        def drive_fills_up(step: int) -> None:
            committed = agent.progress().checkpoint_step
            if committed and not full_after:  # the first commit landed
                full_after.append(committed)
                proxy.set_mix(
                    FaultMix(
                        error_rate=1.0,
                        statuses=(403,),
                        error_reason="storageQuotaExceeded",
                        match=path_contains("/upload/", "POST"),
                    )
                )

        agent.on_step(drive_fills_up)
        with pytest.raises(StorageFullError) as raised:
            agent.fit(build, make_dataset, epochs=1, steps_per_epoch=16, verbose=0)
    text = str(raised.value)
    assert "Google Drive of" in text and "is full" in text, text
    (step,) = full_after
    assert step < 16, "the Drive filled up after training had ended"
    assert f"the checkpoint of step {step} is committed" in text, text
    status = cr.inspect(drive_run_dir, drive_emulator.options())
    assert status.state == "FAILED" and status.checkpoint_step == step
