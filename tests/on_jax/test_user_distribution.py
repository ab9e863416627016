"""The user's ``keras.distribution`` is theirs; a changed layout is named.

Real processes (``mesh_worker.py``) on 8 CPU devices: a ``ModelParallel``
the user set globally before creating the Agent (a (2, 4) mesh, Dense
kernels sharded over ``"model"``) is kept — the kernels train sharded — and
a run SIGKILLed mid-epoch and rerun ends bitwise equal to an uninterrupted
one. The same run resumed on a (4, 2) mesh, or on a ``DataParallel``,
emits ``run.runtime_changed`` naming what changed and saying that the end is
no longer bitwise; with ``on_runtime_change="refuse"`` it is refused by
name before training.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
from support.checkpoints import headers
from support.on_jax import jax_worker
from support.processes import ROOT
from support.processes import read_out as read

KILL_AT = 8  # saves every 3 steps, 6 steps an epoch


def worker(run_dir: str, out: str, *args: str) -> subprocess.CompletedProcess[str]:
    return jax_worker("mesh_worker", run_dir, out, *args)


@pytest.fixture(scope="module")
def killed_once(tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """One run on the (2, 4) mesh, SIGKILLed mid-run; each test resumes a copy."""
    where = tmp_path_factory.mktemp("killed")
    run = str(where / "run")
    died = worker(run, str(where / "first"), "--kill-at-step", str(KILL_AT))
    assert died.returncode == -9, died.stderr[-4000:]
    assert f"KILLING at step {KILL_AT}" in died.stdout  # it died training
    # The sharded kernels were saved by the piece (test_sharded_state.py),
    # and what verify reads puts them together.
    newest = sorted(glob.glob(os.path.join(run, "checkpoints", "step-*")))[-1]
    names = headers(newest)
    assert any(n.startswith("model/") and "@" in n for n in names), sorted(names)
    checked = subprocess.run(
        [sys.executable, "-m", "colab_resume", "verify", run],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT),
        check=False,
    )
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    return run


@pytest.fixture
def killed(killed_once, tmp_path):  # type: ignore[no-untyped-def]
    def copy(_: Any) -> str:
        run = str(tmp_path / "run")
        shutil.copytree(killed_once, run, symlinks=True)
        return run

    return copy


def result_of(out: str) -> dict[str, Any]:
    with open(os.path.join(out, "result.json")) as handle:
        found: dict[str, Any] = json.load(handle)
    return found


def test_a_users_model_parallel_is_kept_and_resumes_bitwise(tmp_path, killed) -> None:
    straight = worker(str(tmp_path / "a"), str(tmp_path / "a-out"))
    assert straight.returncode == 0, straight.stderr[-4000:]
    run = killed(tmp_path)
    rerun = worker(run, str(tmp_path / "b-out"))
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    want, _ = read(str(tmp_path / "a-out"))
    got, result = read(str(tmp_path / "b-out"))
    [line] = result["said"]
    assert line.startswith("training under the ModelParallel the user set"), line
    assert result["restored"] and result["restored"][0] < KILL_AT
    assert result["runtime_changed"] == []  # the same mesh: nothing to say
    # Sharded as the user's LayoutMap says, not replicated by the agent.
    assert result["specs"]["sequential/dense_a/kernel"] == [None, "model"]
    assert result["specs"]["sequential/out/kernel"] == [None, None]
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name


def test_another_mesh_is_named(tmp_path, killed) -> None:
    run = killed(tmp_path)
    rerun = worker(run, str(tmp_path / "out"), "--mesh", "4,2")
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    _, result = read(str(tmp_path / "out"))
    (event,) = result["runtime_changed"]
    assert "distribution.mesh [2, 4] -> [4, 2]" in event["changes"]
    assert "No bitwise equality with an uninterrupted run" in event["message"]
    assert "the runtime changed: " in rerun.stderr  # and in the log
    # And the report names it under the session that resumed there.
    drawn = cli("report", run, "-o", str(tmp_path / "r.png"))
    assert (
        "resumed on another runtime: replicas 2 -> 4, "
        "distribution.mesh [2, 4] -> [4, 2]" in drawn
    ), drawn
    # And status, with the step it changed at and what that costs.
    said = cli("status", run)
    assert (
        f"runtime: changed since step {result['restored'][0]} — replicas 2 -> 4, "
        "distribution.mesh [2, 4] -> [4, 2]; the end may not be bitwise" in said
    ), said


def cli(*args: str) -> str:
    """``python -m colab_resume ARGS``'s output (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "colab_resume", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=ROOT),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_data_parallel_after_model_parallel_is_named(tmp_path, killed) -> None:
    run = killed(tmp_path)
    rerun = worker(run, str(tmp_path / "out"), "--data-parallel")
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    _, result = read(str(tmp_path / "out"))
    (event,) = result["runtime_changed"]
    assert "distribution.kind ModelParallel -> DataParallel" in event["changes"]
    assert any(c.startswith("distribution.layouts ") for c in event["changes"])


def test_refuse_stops_a_resume_on_another_mesh_before_training(
    tmp_path, killed
) -> None:
    run = killed(tmp_path)
    rerun = worker(run, str(tmp_path / "out"), "--mesh", "4,2", "--refuse")
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    result = result_of(str(tmp_path / "out"))
    refused = result["refused"]
    assert "distribution.mesh [2, 4] -> [4, 2]" in refused
    assert "on_runtime_change='continue'" in refused
    assert "specs" not in result  # nothing trained


def test_a_tf_distribute_strategy_is_refused_by_name_on_jax(tmp_path) -> None:
    """A stand-in with a strategy's attributes: TensorFlow is not installed
    here, which is the point (the user's Keras runs on JAX)."""
    from colab_resume import Agent
    from colab_resume.runtime.errors import ConnectOptionError

    class MirroredStrategy:
        num_replicas_in_sync = 2

        def scope(self) -> None: ...

    run = str(tmp_path / "run")
    with pytest.raises(ConnectOptionError, match="Keras runs on JAX here"):
        Agent(run, strategy=MirroredStrategy())
    assert not os.path.exists(run)  # refused before anything was written
