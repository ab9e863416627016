"""One wrapper for the child processes tests start: workers and the CLI.

    proc = worker("holder", run_dir, "--endpoint", url)   # started, not awaited
    proc.expect("READY")                                   # next stdout line
    proc.kill()
    result = run_worker("agent_worker", run_dir, out, expect_rc=-9)
    assert "KILLING" in result.stdout

Workers are the scripts in ``tests/workers/``. They import ``support``
from ``tests/``, which :func:`worker` puts first on their ``PYTHONPATH``
(:func:`python_path`; the repository root comes last, for this tree's
``colab_resume``); the other scripts the tests start (``tests/on_jax``,
``tests/examples``) get the same. By hand, from the repository root:
``PYTHONPATH=tests python tests/workers/holder.py ...``.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from support.compare import load

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
WORKERS = os.path.join(TESTS, "workers")
CLI = [sys.executable, "-m", "colab_resume"]


def python_path(*first: str) -> str:
    """The ``PYTHONPATH`` of a script the tests start: ``tests/`` (so
    ``support`` imports), then ``first`` (empty entries dropped), then the
    repository root."""
    return os.pathsep.join(path for path in (TESTS, *first, ROOT) if path)


def write_out(out_dir: str, model: Any, result: dict[str, Any]) -> None:
    """What a worker leaves for :func:`read_out`: every model and optimizer
    variable of ``model`` in ``weights.npz`` (in order), and ``result``."""
    import keras
    import numpy as np

    variables = list(model.variables) + list(model.optimizer.variables)
    np.savez(
        os.path.join(out_dir, "weights.npz"),
        **{
            f"{i:03d}": np.asarray(keras.ops.convert_to_numpy(v.value))
            for i, v in enumerate(variables)
        },
    )
    with open(os.path.join(out_dir, "result.json"), "w") as handle:
        json.dump(result, handle, default=str)


def read_out(out_dir: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a worker left in ``out_dir``: name -> array from its
    ``weights.npz``, and its ``result.json``."""
    arrays = load(os.path.join(out_dir, "weights.npz"))
    with open(os.path.join(out_dir, "result.json")) as handle:
        return arrays, json.load(handle)


@dataclass(frozen=True)
class Result:
    """How a child process ended and what it printed."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def lines(self, prefix: str) -> list[str]:
        """The stdout lines that start with ``prefix``."""
        return [line for line in self.stdout.splitlines() if line.startswith(prefix)]

    def last(self, prefix: str) -> str:
        """The last stdout line that starts with ``prefix`` (it must exist)."""
        found = self.lines(prefix)
        assert found, f"no {prefix!r} line in the output of {self.argv}:\n{self}"
        return found[-1]

    def __str__(self) -> str:
        return (
            f"exit code {self.returncode}\n--- stdout\n{self.stdout}"
            f"--- stderr (tail)\n{self.stderr[-4000:]}"
        )


class Process:
    """A running child whose stdout lines can be awaited, one by one.

    Its stdout and stderr are read on threads from the start, so a chatty
    child never blocks on a full pipe.
    """

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.popen = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump_out, daemon=True),
            threading.Thread(target=self._pump_err, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def stdout(self) -> str:
        """What it printed so far (for :func:`support.wait_for`; the lines
        stay in the queue :meth:`expect` reads)."""
        return "".join(self._stdout)

    @property
    def stderr(self) -> str:
        """What it wrote to stderr so far."""
        return "".join(self._stderr)

    def _pump_out(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._stdout.append(line)
            self._lines.put(line.rstrip("\n"))

    def _pump_err(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self._stderr.append(line)

    def expect(self, prefix: str, timeout: float = 30.0) -> str:
        """The next stdout line, which must start with ``prefix``."""
        line = self._next_line(prefix, timeout)
        assert line.startswith(prefix), f"expected {prefix!r}, got {line!r}"
        return line

    def skip_to(self, prefix: str, timeout: float = 30.0) -> str:
        """The first stdout line from now that starts with ``prefix``."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._next_line(prefix, max(0.0, deadline - time.monotonic()))
            if line.startswith(prefix):
                return line

    def _next_line(self, prefix: str, timeout: float) -> str:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no {prefix!r} line within {timeout:.0f}s from {self.argv}; "
                f"stderr:\n{self.stderr[-4000:]}"
            ) from None

    def exited_early(self) -> str | None:
        """For :func:`support.wait_for`'s ``unless``: why waiting is pointless."""
        if self.alive:
            return None
        return f"{self.argv[1:2]} exited with {self.popen.returncode}"

    def finish(self, expect_rc: int | None = 0, timeout: float = 300.0) -> Result:
        """Wait for the exit; check the exit code unless ``expect_rc`` is None.

        A negative ``expect_rc`` is a signal: ``-9`` for SIGKILL.
        """
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.argv} still running after {timeout}s; stderr:\n"
                + self.stderr[-4000:]
            ) from None
        for pump in self._pumps:
            pump.join(timeout=10)
        result = Result(
            self.argv, self.popen.returncode, "".join(self._stdout), self.stderr
        )
        if expect_rc is not None:
            assert result.returncode == expect_rc, (
                f"{self.argv} expected exit code {expect_rc}, got {result}"
            )
        return result

    def kill(self) -> None:
        """SIGKILL (no cleanup in the child) and reap it."""
        if self.alive:
            self.popen.kill()
        self.popen.wait()

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def worker(name: str, *args: str, env: dict[str, str] | None = None) -> Process:
    """Start ``tests/workers/NAME.py ARGS``; ``env`` is added to this
    process's environment (a ``PYTHONPATH`` there comes after ``tests/``)."""
    path = os.path.join(WORKERS, f"{name}.py")
    assert os.path.exists(path), f"no worker {name!r} in {WORKERS}"
    env = dict(env or {})
    env["PYTHONPATH"] = python_path(
        env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    )
    return Process([sys.executable, path, *args], env=env)


def run_worker(
    name: str,
    *args: str,
    expect_rc: int | None = 0,
    timeout: float = 300.0,
    env: dict[str, str] | None = None,
) -> Result:
    """Run a worker to its end and check its exit code."""
    return worker(name, *args, env=env).finish(expect_rc, timeout)


def cli(*args: str, env: dict[str, str] | None = None) -> Process:
    """Start ``python -m colab_resume ARGS``."""
    return Process([*CLI, *args], env=env)


def run_cli(
    *args: str,
    expect_rc: int | None = None,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> Result:
    """Run the CLI to its end; by default any exit code (tests check it)."""
    return cli(*args, env=env).finish(expect_rc, timeout)


def train_agent(
    run_dir: str, out: str, *args: str, endpoint: str | None = None, expect_rc: int = 0
) -> Result:
    """One run of ``tests/workers/agent_worker.py`` (``endpoint``: the
    storage emulator's URL), awaited, with its expected exit code."""
    endpoint_args = ("--endpoint", endpoint) if endpoint else ()
    return run_worker(
        "agent_worker", run_dir, out, *args, *endpoint_args, expect_rc=expect_rc
    )


def steps_here(result: Result) -> int:
    """How many steps the agent worker trained in that run (its DONE line)."""
    return int(result.last("DONE").split("steps_here=")[1])
