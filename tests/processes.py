"""Start and read helper processes (holders) for tests with real kills."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))


class Proc:
    """A child process whose stdout lines can be awaited."""

    def __init__(self, argv: list[str]) -> None:
        self.popen = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line.rstrip("\n"))

    def _pump_err(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.stderr.append(line)

    def expect(self, prefix: str, timeout: float = 30.0) -> str:
        """The next stdout line, which must start with ``prefix``."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no {prefix!r} line within {timeout}s; stderr:\n"
                + "".join(self.stderr)
            ) from None
        assert line.startswith(prefix), f"expected {prefix!r}, got {line!r}"
        return line

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


def holder(run_dir: str, endpoint: str | None, *args: str) -> Proc:
    argv = [sys.executable, os.path.join(HERE, "holder.py"), run_dir]
    if endpoint:
        argv += ["--endpoint", endpoint]
    return Proc(argv + list(args))
