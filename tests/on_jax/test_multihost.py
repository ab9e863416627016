"""Multi-process ``fit`` and ``run`` on JAX's CPU runtime: real processes and signals.

Two processes x two CPU devices (and once four processes x one), gloo
collectives, a coordinator on 127.0.0.1
(tests/on_jax/multihost_worker.py). A process SIGKILLed during
training makes the survivor exit RESTART within the peer bound, and the
restarted pair ends bitwise equal to an uninterrupted run; a SIGTERM to one
process makes both checkpoint at the same step through JAX's preemption
sync point and exit PREEMPTED; a checkpoint missing one process's marker is
never restored. The custom loop (``agent.run``) survives the same SIGKILL
bitwise; data the user shards per process (``data_sharding="per_process"``)
trains and resumes bitwise, and shards that disagree fail on every process.
"""

from __future__ import annotations

import glob
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from support.checkpoints import header
from support.processes import python_path

from colab_resume import exit_status
from colab_resume.checkpoint.restore import restore_latest
from colab_resume.events import EventLog
from colab_resume.protocol import rundir
from colab_resume.storage import Storage

WORKER = os.path.join(os.path.dirname(__file__), "multihost_worker.py")
TOTAL_STEPS = 18  # the worker's 3 epochs x 6 steps
DEAD_AFTER = 4.0
pytestmark = pytest.mark.timeout(300)


class Proc:
    """One worker process, its stdout read line by line on a thread."""

    def __init__(
        self, run_dir: str, out: str, k: int, port: int, *extra: str, processes: int = 2
    ) -> None:
        argv = [sys.executable, WORKER, run_dir, out, "--process", str(k)]
        argv += [
            "--processes",
            str(processes),
            "--port",
            str(port),
            "--dead-after",
            str(DEAD_AFTER),
        ]
        env = dict(os.environ, PYTHONPATH=python_path(), KERAS_BACKEND="jax")
        self.proc = subprocess.Popen(
            [*argv, *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self.steps: list[int] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if line.startswith("STEP "):
                self.steps.append(int(line.split()[1]))
                self.lines.put(line)

    def wait_for_step(self, step: int, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                assert self.proc.poll() is None, self.text()
                continue
            if int(line.split()[1]) >= step:
                return int(line.split()[1])
        raise AssertionError(f"no STEP {step} in time:\n{self.text()}")

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout=timeout)

    def text(self) -> str:
        return "".join(self.output[-60:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_group(run_dir: str, out: str, *extra: str, processes: int) -> list[Proc]:
    port = free_port()
    return [
        Proc(run_dir, out, k, port, *extra, processes=processes)
        for k in range(processes)
    ]


def run_pair(run_dir: str, out: str, *extra: str) -> tuple[Proc, Proc]:
    first, second = run_group(run_dir, out, *extra, processes=2)
    return first, second


def finish(group: tuple[Proc, ...] | list[Proc]) -> None:
    codes = [p.wait() for p in group]
    assert codes == [0] * len(group), "\n----\n".join(p.text() for p in group)


def weights(out: str, k: int) -> list[np.ndarray]:
    with np.load(os.path.join(out, f"weights.p{k}.npz")) as data:
        return [data[name] for name in data.files]


def assert_bitwise(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """An uninterrupted 2 x 2 run: its run directory and outputs."""
    base = tmp_path_factory.mktemp("reference")
    run_dir, out = str(base / "run"), str(base / "out")
    finish(run_pair(run_dir, out))
    return run_dir, out


def test_two_processes_fit_with_one_owner(reference: tuple[str, str]) -> None:
    run_dir, out = reference
    assert_bitwise(weights(out, 0), weights(out, 1))  # replicated, equal
    assert os.path.exists(os.path.join(run_dir, rundir.DONE_RECORD))
    assert os.listdir(os.path.join(run_dir, "lease")) == ["00000001.json"]
    beats = sorted(os.listdir(os.path.join(run_dir, "heartbeat")))
    assert beats == ["00000001.json", "00000001.p0.json", "00000001.p1.json"]
    newest = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1]
    with open(os.path.join(run_dir, "checkpoints", newest, rundir.MANIFEST)) as f:
        manifest = json.load(f)
    assert manifest["processes"] == 2
    assert [m["name"] for m in manifest["markers"]] == [
        "PROCESS-0.json",
        "PROCESS-1.json",
    ]


@pytest.fixture(scope="module")
def run_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """An uninterrupted 2 x 2 custom loop (``agent.run``): run dir, outputs."""
    base = tmp_path_factory.mktemp("run-reference")
    run_dir, out = str(base / "run"), str(base / "out")
    finish(run_pair(run_dir, out, "--loop", "run"))
    return run_dir, out


def test_sigkill_of_one_process_restart_is_bitwise(
    reference: tuple[str, str], tmp_path: str
) -> None:
    kill_one_restart_bitwise(reference, tmp_path)


def test_custom_loop_sigkill_of_one_process_restart_is_bitwise(
    run_reference: tuple[str, str], tmp_path: str
) -> None:
    """``agent.run`` on 2 x 2: each process's rows assembled into the global
    batch its jitted step gets, the same step-end duties and watch as fit."""
    _, ref_out = run_reference
    assert_bitwise(weights(ref_out, 0), weights(ref_out, 1))  # replicated, equal
    kill_one_restart_bitwise(run_reference, tmp_path, "--loop", "run")


def test_custom_loop_with_keras_train_on_batch_equals_fit(
    reference: tuple[str, str], tmp_path: str
) -> None:
    """``agent.run`` whose step is Keras' ``train_on_batch`` on
    ``cr.process_rows(batch)`` (this process's rows of the global batch):
    on 2 x 2 it ends bitwise equal to ``agent.fit`` over the same data."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    finish(run_pair(run_dir, out, "--loop", "run-keras"))
    _, ref_out = reference
    for k in (0, 1):
        assert_bitwise(weights(out, k), weights(ref_out, k))


def kill_one_restart_bitwise(
    reference: tuple[str, str], tmp_path: str, *extra: str, processes: int = 2
) -> None:
    """SIGKILL one process (not the coordinator, process 0: its death aborts
    the others with 134, docs/guide/multi-host.md) at a random step of
    training; every survivor exits RESTART within the bound; the restarted
    group ends bitwise as ``reference``."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    target = random.Random().randint(4, TOTAL_STEPS - 6)
    group = run_group(run_dir, out, "--step-delay", "0.15", *extra, processes=processes)
    victim = group[random.Random().randrange(1, processes)]
    survivors = [p for p in group if p is not victim]
    at = victim.wait_for_step(target)
    victim.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    assert victim.wait() == -signal.SIGKILL
    for survivor in survivors:
        assert survivor.wait(timeout=60) == exit_status.RESTART, survivor.text()
    took = time.monotonic() - killed
    # The kill landed during training: no process reached the end.
    assert at < TOTAL_STEPS
    assert all(max(p.steps) < TOTAL_STEPS for p in survivors)
    assert took < 3 * DEAD_AFTER + 10, took
    finish(run_group(run_dir, out, *extra, processes=processes))
    _, ref_out = reference
    for k in range(processes):  # the state is replicated: whole in each
        assert_bitwise(weights(out, k), weights(ref_out, 0))
    with open(os.path.join(out, "result.p0.json")) as f:
        resumed = json.load(f)["resumed_at"]
    assert resumed is not None and 0 < resumed <= at


def test_four_processes_of_one_device_each_restart_bitwise(
    reference: tuple[str, str], tmp_path: str
) -> None:
    """4 x 1, one CPU device per process (a slice of single-chip hosts): the
    same four replicas as the 2 x 2 reference, in four processes. A SIGKILL
    of one of processes 1-3 at a random step makes the three survivors exit
    RESTART; the restarted four end bitwise equal to the 2 x 2 run."""
    kill_one_restart_bitwise(reference, tmp_path, "--devices", "1", processes=4)


def test_sigterm_to_one_process_checkpoints_all_at_one_step(
    reference: tuple[str, str], tmp_path: str
) -> None:
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    target = random.Random().randint(3, TOTAL_STEPS - 6)
    first, second = run_pair(run_dir, out, "--step-delay", "0.15")
    signalled = first if random.Random().random() < 0.5 else second
    signalled.wait_for_step(target)
    signalled.proc.send_signal(signal.SIGTERM)
    codes = [p.wait() for p in (first, second)]
    assert codes == [exit_status.PREEMPTED] * 2, first.text() + second.text()
    stops = []
    for k in (0, 1):
        with open(os.path.join(run_dir, rundir.process_heartbeat_path(1, k))) as f:
            beat = json.load(f)
        assert beat["state"] == "preempted"
        stops.append(beat["step"])
    assert stops[0] == stops[1] < TOTAL_STEPS
    committed = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1]
    assert rundir.CheckpointName.parse(committed).step == stops[0]  # type: ignore[union-attr]
    finish(run_pair(run_dir, out))
    _, ref_out = reference
    assert_bitwise(weights(out, 0), weights(ref_out, 0))
    with open(os.path.join(out, "result.p0.json")) as f:
        assert json.load(f)["resumed_at"] == stops[0]


def test_checkpoint_missing_one_process_marker_is_never_restored(
    reference: tuple[str, str], tmp_path: str
) -> None:
    run_dir = str(tmp_path / "run")  # type: ignore[operator]
    shutil.copytree(reference[0], run_dir)
    names = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    newest, older = names[-1], names[-2]
    os.remove(os.path.join(run_dir, "checkpoints", newest, "PROCESS-1.json"))
    read: list[int] = []
    os.makedirs(tmp_path / "scratch")  # type: ignore[operator]

    def record(prefix: str, manifest: object, arrived: object) -> tuple[str, ...]:
        read.append(manifest.step)  # type: ignore[attr-defined]
        return ()

    info = restore_latest(
        Storage(run_dir),
        read=record,
        events=EventLog(),
        scratch_dir=str(tmp_path / "scratch"),  # type: ignore[operator]
        workers=1,
        progress_seconds=60.0,
    )
    assert info is not None and info.name.dirname == older
    assert [name for name, _ in info.skipped] == [newest]
    assert "process(es) [1]" in info.skipped[0][1]


@pytest.fixture(scope="module")
def sharded_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """An uninterrupted 2 x 2 run under the user's ``ModelParallel`` that
    splits the first Dense layer across the processes."""
    base = tmp_path_factory.mktemp("sharded-reference")
    run_dir, out = str(base / "run"), str(base / "out")
    finish(run_pair(run_dir, out, "--model-parallel"))
    return run_dir, out


def test_a_state_sharded_across_processes_is_written_by_each_and_resumes_bitwise(
    sharded_reference: tuple[str, str], tmp_path: str
) -> None:
    """Each process writes the pieces only its devices hold (process 1 its
    own file, listed in its done marker); the manifest lists both; verify
    puts them together; a SIGKILL of process 1 mid-run and a restart end
    bitwise equal to the uninterrupted run."""
    run_dir, _ = sharded_reference
    newest = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "step-*")))[-1]
    with open(os.path.join(newest, rundir.MANIFEST)) as f:
        listed = [e["name"] for e in json.load(f)["files"]]
    assert listed == ["ckpt.safetensors", "ckpt.p00001.safetensors"], listed
    with open(os.path.join(newest, "PROCESS-1.json")) as f:
        assert [e["name"] for e in json.load(f)["files"]] == [listed[1]]
    own = header(os.path.join(newest, listed[1]))
    # The first kernel (5 x 8) in two pieces of four columns, one a process.
    assert "model/000000@0,4" in own and "model/000000@0,0" not in own
    assert all("@" in n for n in own)  # nothing replicated written twice
    checked = subprocess.run(
        [sys.executable, "-m", "colab_resume", "verify", run_dir],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=python_path()),
        check=False,
    )
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    kill_one_restart_bitwise(sharded_reference, tmp_path, "--model-parallel")


def test_two_by_two_continues_on_one_by_two_naming_the_change(
    tmp_path: str,
) -> None:
    """A 2-process slice's checkpoint read by one process with 2 devices
    (the replicated DataParallel state is whole in it): training continues
    from the committed step, and the event says processes 2 -> 1."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    finish(run_pair(run_dir, out, "--epochs", "1"))
    committed = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1]
    step = rundir.CheckpointName.parse(committed).step  # type: ignore[union-attr]
    assert step == TOTAL_STEPS // 3
    single = Proc(run_dir, out, 0, 0, processes=1)
    assert single.wait() == 0, single.text()
    assert min(single.steps) == step + 1  # continued, not restarted
    with open(os.path.join(out, "result.p0.json")) as f:
        result = json.load(f)
    assert result["resumed_at"] == step
    (changed,) = result["changes"]
    assert "processes 2 -> 1" in changed and "replicas 4 -> 2" in changed, changed
    with open(os.path.join(run_dir, rundir.DONE_RECORD)) as f:
        assert json.load(f)["final_step"] == TOTAL_STEPS


def test_one_processs_stop_and_clock_saves_are_agreed(
    reference: tuple[str, str], tmp_path: str
) -> None:
    """A save every 0.2 s (each process's own clock) and stop() called on
    process 1 alone: every save and the stop happen at one step on both
    (else process 0 would wait for a marker that never comes and fail), and
    a restart ends bitwise equal to the uninterrupted run."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    stop_at = 7
    pair = run_pair(
        run_dir,
        out,
        "--step-delay",
        "0.15",
        "--save-every-seconds",
        "0.2",
        "--stop-at",
        str(stop_at),
        "--stop-process",
        "1",
    )
    finish(pair)
    stops = []
    for k in (0, 1):
        with open(os.path.join(out, f"result.p{k}.json")) as f:
            assert json.load(f)["stopped"] is True
        with open(os.path.join(run_dir, rundir.process_heartbeat_path(1, k))) as f:
            stops.append(json.load(f)["step"])
    assert stops[0] == stops[1] and stop_at <= stops[0] < TOTAL_STEPS, stops
    assert max(pair[0].steps) == max(pair[1].steps) == stops[0]
    names = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    steps = [rundir.CheckpointName.parse(n).step for n in names]  # type: ignore[union-attr]
    assert steps[-1] == stops[0]
    # The clock's saves came between the every-2-steps ones, agreed (the
    # oldest are pruned by now: process 0's commit events say it).
    with open(os.path.join(out, "result.p0.json")) as f:
        committed = json.load(f)["committed"]
    assert any(step % 2 for step in committed), committed
    for name in names:
        listed = os.listdir(os.path.join(run_dir, "checkpoints", name))
        assert rundir.MANIFEST in listed, (name, listed)
    finish(run_pair(run_dir, out))
    _, ref_out = reference
    for k in (0, 1):
        assert_bitwise(weights(out, k), weights(ref_out, k))


PER_PROCESS = ("--data", "per-process")


def test_per_process_shards_train_and_resume_bitwise(
    reference: tuple[str, str], tmp_path: str
) -> None:
    """``data_sharding="per_process"``: each process's make_dataset yields
    only its own rows (the rows the agent would feed it, so the run must end
    bitwise equal to the global-data reference). Stopped mid-run by process
    0 alone; a restart with process 1's shard changed (same shapes, rows
    reversed) fails on both processes: the fingerprint covers every
    process's first batch; the restart with the same shards is bitwise."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    stop = ("--step-delay", "0.1", "--stop-at", "5", "--stop-process", "0")
    finish(run_pair(run_dir, out, *PER_PROCESS, *stop))
    with open(os.path.join(run_dir, rundir.process_heartbeat_path(1, 0))) as f:
        stopped = json.load(f)["step"]
    assert 5 <= stopped < TOTAL_STEPS, stopped
    changed = run_pair(run_dir, out, *PER_PROCESS, "--change-shard", "1:reversed")
    codes = [p.wait() for p in changed]
    assert codes == [exit_status.FAILED] * 2, changed[0].text() + changed[1].text()
    for p in changed:
        assert "NonDeterministicDatasetError" in p.text(), p.text()
        assert not p.steps  # refused before a step
    finish(run_pair(run_dir, out, *PER_PROCESS))
    _, ref_out = reference
    for k in (0, 1):
        assert_bitwise(weights(out, k), weights(ref_out, k))
    with open(os.path.join(out, "result.p0.json")) as f:
        assert json.load(f)["resumed_at"] == stopped


def test_per_process_shards_that_disagree_fail_on_every_process(
    tmp_path: str,
) -> None:
    """Process 1's shard is one row short: both processes fail at once, before
    a step, each naming both processes' row counts and shapes."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    pair = run_pair(run_dir, out, *PER_PROCESS, "--change-shard", "1:short")
    codes = [p.wait() for p in pair]
    assert codes == [exit_status.FAILED] * 2, pair[0].text() + pair[1].text()
    said = {
        0: "process 1's batch has 3 rows, process 0's 4",
        1: "process 0's batch has 4 rows, process 1's 3",
    }
    for k, p in enumerate(pair):
        assert said[k] in p.text(), p.text()
        assert "process 1: (3, 5) float32" in p.text(), p.text()
        assert not p.steps


@pytest.mark.parametrize(
    ("setting", "second", "said"),
    [
        ("the run directory", ("--other-run-dir",), "run2"),
        ("save_every_seconds", ("--save-every-seconds", "5"), "process 1: 5.0"),
        (
            "the steps to train (epochs x steps_per_epoch)",
            ("--epochs", "2"),
            "process 0: 18; process 1: 12",
        ),
    ],
    ids=["run-dir", "option", "epochs"],
)
def test_processes_started_differently_are_refused_by_name_not_restarted(
    tmp_path: str, setting: str, second: tuple[str, ...], said: str
) -> None:
    """Each process refuses at once with MISMATCH (78: a launcher does not
    restart on it), naming the setting and both values; nothing trains."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    port = free_port()
    extra = list(second)
    other = run_dir
    if extra == ["--other-run-dir"]:
        other, extra = str(tmp_path / "run2"), []  # type: ignore[operator]
    pair = [Proc(run_dir, out, 0, port), Proc(other, out, 1, port, *extra)]
    codes = [p.wait() for p in pair]
    assert codes == [exit_status.MISMATCH] * 2, pair[0].text() + pair[1].text()
    for p in pair:
        assert f"the processes disagree on {setting}" in p.text(), p.text()
        assert said in p.text(), p.text()
        assert not p.steps  # refused before a step
    assert not os.path.exists(os.path.join(run_dir, rundir.CHECKPOINT_DIR))


def test_a_peer_that_never_starts_is_named_with_a_countdown_then_given_up(
    tmp_path: str,
) -> None:
    """Process 1 is never started: process 0 says whom it awaits, counts
    down, and ends with FAILED and what to check (not JAX's abort)."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    port = free_port()
    alone = Proc(run_dir, out, 0, port, "--start-timeout", "6")
    assert alone.wait(timeout=120) == exit_status.FAILED, alone.text()
    text = alone.text()
    assert f"process 0 of 2: waiting for process 1 at 127.0.0.1:{port}" in text
    assert "giving up in" in text
    assert "did not join within 6s (start_timeout_seconds)" in text, text
    assert "Check that every process was started" in text
    assert not alone.steps


def kill_mid_epoch(run_dir: str, out: str, *extra: str) -> int:
    """Run a 2 x 2 group, SIGKILL process 1 once step 8 (two steps into
    epoch 1) is committed and step 9 trained, let the survivor exit RESTART;
    returns the step committed last. Steps are 0.3 s apart, so the next
    save (step 10) cannot have committed when the kill lands."""
    group = run_group(run_dir, out, "--step-delay", "0.3", *extra, processes=2)
    victim = group[1]
    victim.wait_for_step(9)
    deadline = time.monotonic() + 60
    while 8 not in committed_steps(run_dir):
        assert time.monotonic() < deadline, victim.text()
        time.sleep(0.02)
    victim.proc.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    assert group[0].wait(timeout=60) == exit_status.RESTART, group[0].text()
    assert max(group[0].steps) < TOTAL_STEPS  # the kill landed in training
    return max(committed_steps(run_dir))


@pytest.mark.parametrize("data", ["grain", "grain-per-process"])
def test_grain_iterators_resume_bitwise_after_a_peer_is_killed(
    reference: tuple[str, str], tmp_path: str, data: str
) -> None:
    """Grain iterators fed the reference's rows (every process the global
    batches, or each its own shard). Killed two steps into epoch 1, the
    pair restarts with each process's iterator set to its own saved state
    (per process, process 1's state differs from process 0's: its pipeline
    drops a row for every row it yields), and ends bitwise equal to the
    reference."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    committed = kill_mid_epoch(run_dir, out, "--data", data)
    assert committed == 8, committed
    saved = checkpoint_extras(run_dir, committed)["grain"]
    if data == "grain-per-process":
        states = [part["state"] for part in saved["processes"]]
        assert len(states) == 2 and states[0] != states[1], saved
    else:
        assert "processes" not in saved and saved["state"], saved
    finish(run_pair(run_dir, out, "--data", data))
    _, ref_out = reference
    for k in (0, 1):
        assert_bitwise(weights(out, k), weights(ref_out, k))
        with open(os.path.join(out, f"result.p{k}.json")) as f:
            result = json.load(f)
        assert result["resumed_at"] == committed
        (said,) = result["positioned"]
        assert "by its iterator's saved state" in said, said


def test_an_elastic_grain_iterator_continues_from_two_processes_on_one(
    tmp_path: str,
) -> None:
    """Each of two processes reads its shard of a Grain ``ElasticIterator``;
    killed two steps into epoch 1, the run continues on one process from
    the iterator's global position (saved alike by both shards), says
    "processes 2 -> 1", and epoch 1 ends with every one of its rows drawn
    once: the iterator's position at the end is the epoch's row count
    (positioned at 0 it would stop 16 rows short)."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")  # type: ignore[operator]
    committed = kill_mid_epoch(run_dir, out, "--data", "grain-elastic")
    assert committed == 8, committed
    single = Proc(
        run_dir, out, 0, 0, "--data", "grain-elastic", "--epochs", "2", processes=1
    )
    assert single.wait() == 0, single.text()
    assert min(single.steps) == committed + 1
    with open(os.path.join(out, "result.p0.json")) as f:
        result = json.load(f)
    (said,) = result["positioned"]
    assert "elastic iterator's global position" in said, said
    assert "processes 2 -> 1" in said, said
    final = checkpoint_extras(run_dir, 2 * STEPS_PER_EPOCH)["grain"]
    assert final["batch"] == STEPS_PER_EPOCH, final
    assert final["state"] == {"global_next_index": STEPS_PER_EPOCH * 8}, final


STEPS_PER_EPOCH = TOTAL_STEPS // 3


def manifests(run_dir: str) -> dict[int, str]:
    """Step -> manifest path of every committed checkpoint in ``run_dir``."""
    found = {}
    top = os.path.join(run_dir, rundir.CHECKPOINT_DIR)
    for name in os.listdir(top) if os.path.isdir(top) else ():
        parsed = rundir.CheckpointName.parse(name)
        manifest = os.path.join(top, name, rundir.MANIFEST)
        if parsed is not None and os.path.exists(manifest):
            found[parsed.step] = manifest
    return found


def committed_steps(run_dir: str) -> list[int]:
    return sorted(manifests(run_dir))


def checkpoint_extras(run_dir: str, step: int) -> dict[str, object]:
    """The extras of the committed checkpoint at ``step``."""
    with open(manifests(run_dir)[step]) as f:
        return json.load(f)["extras"]  # type: ignore[no-any-return]
