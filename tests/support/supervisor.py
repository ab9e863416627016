"""A small launcher for tests: restart the command while its status says so.

What SkyPilot's managed jobs, a Vertex AI job with
``restartJobOnWorkerRestart`` or a JobSet ``failurePolicy`` rule do with
the exit statuses of :mod:`colab_resume.exit_status`, in a loop: 143
(PREEMPTED) and 75 (RESTART) start the same command again; 0 (COMPLETED),
1 (FAILED), 5 (STOPPED) and anything else end it.

    results = supervise(argv, env=env, during=lambda attempt, proc: ...)
"""

from __future__ import annotations

from collections.abc import Callable

from colab_resume import exit_status
from support.processes import Process, Result

RESTART_ON = frozenset({exit_status.PREEMPTED, exit_status.RESTART})


def supervise(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    during: Callable[[int, Process], None] | None = None,
    after: Callable[[int, Result], None] | None = None,
    max_starts: int = 5,
    timeout: float = 300.0,
) -> list[Result]:
    """Run ``argv`` until its status is not a restart one; every attempt's result.

    Args:
        argv: the command, the same at every start.
        env: added to the environment of every start.
        during: called with (attempt, process) while each attempt runs (a
            test sends its signal there).
        after: called with (attempt, result) once each attempt has exited,
            before the next starts (a test reads the run directory there).
        max_starts: starts before giving up (an AssertionError).
    """
    results: list[Result] = []
    for attempt in range(max_starts):
        with Process(argv, env=env) as proc:
            if during is not None:
                during(attempt, proc)
            result = proc.finish(expect_rc=None, timeout=timeout)
        results.append(result)
        if after is not None:
            after(attempt, result)
        if result.returncode not in RESTART_ON:
            return results
    raise AssertionError(f"still asking for restarts after {max_starts} starts")
