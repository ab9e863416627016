"""``on_done``: the user's teardown, so the bill stops when the run does.

A Cloud TPU or a VM bills until it is deleted or stopped, finished run or
not. ``on_done`` is the command (or Python callable) that ends it, run
once the run has COMPLETED (``DONE.json`` written) and never after a
failed, preempted or stopped run unless ``when`` says so: deleting the VM
of a preempted run would leave nothing for the launcher to restart, and
deleting a failed one would throw away what a person needs to debug it.

The command is split like a shell would (``shlex``) but never run through
a shell; the run's facts reach it only as environment variables
(``COLAB_RESUME_OUTCOME``, ``COLAB_RESUME_RUN_DIR``, ``COLAB_RESUME_STEP``),
as ``colab-resume watch --on-dead`` does. A dry run (``dry_run=True``, or
``COLAB_RESUME_ON_DONE_DRY_RUN=1`` in the environment, for rehearsals)
prints the command instead of running it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from colab_resume import exit_status

log = logging.getLogger(__name__)

DRY_RUN_ENV = "COLAB_RESUME_ON_DONE_DRY_RUN"
OUTCOMES = frozenset(exit_status.NAMES[s] for s in exit_status.NAMES)
# FAILED is never the default, RESTART is never a single process's outcome.
OUTCOMES = OUTCOMES - {exit_status.NAMES[exit_status.RESTART]}
COMPLETED = exit_status.NAMES[exit_status.COMPLETED]


@dataclasses.dataclass(frozen=True)
class Teardown:
    """What to run when a run ends, and after which outcomes.

    Attributes:
        command: a command line (split with ``shlex``, run without a shell)
            or a callable given the facts as a dict of the same
            ``COLAB_RESUME_*`` names.
        when: the outcomes it runs after (``"COMPLETED"``, ``"STOPPED"``,
            ``"PREEMPTED"``, ``"FAILED"``); only COMPLETED by default.
        dry_run: print what would run instead of running it.
    """

    command: str | Callable[[dict[str, str]], Any]
    when: frozenset[str] = frozenset({COMPLETED})
    dry_run: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.command, str):
            if not shlex.split(self.command):
                raise ValueError("on_done's command is empty")
        elif not callable(self.command):
            raise ValueError(
                f"on_done must be a command line (str) or a callable, got "
                f"{self.command!r}"
            )
        when = frozenset(self.when)
        unknown = sorted(when - OUTCOMES)
        if unknown or not when:
            raise ValueError(
                f"on_done's when must name outcomes among {sorted(OUTCOMES)}, got "
                f"{sorted(when)}"
            )
        object.__setattr__(self, "when", when)


def teardown_of(value: Any) -> Teardown | None:
    """The ``on_done`` option as a :class:`Teardown` (None: no teardown).

    Raises:
        ValueError: it is neither None, a command line, a callable nor a
            :class:`Teardown`.
    """
    if value is None or isinstance(value, Teardown):
        return value
    return Teardown(value)


def environment(facts: Mapping[str, object]) -> dict[str, str]:
    """``facts`` as ``COLAB_RESUME_*`` variables (NUL dropped), over os.environ."""
    env = dict(os.environ)
    for key, value in facts.items():
        text = "" if value is None else str(value).replace("\0", "")
        env[f"COLAB_RESUME_{key.upper()}"] = text
    return env


def run_teardown(
    teardown: Teardown | None,
    outcome: str,
    facts: Mapping[str, object],
    *,
    say: Callable[[str], None] = print,
) -> int | None:
    """Run ``teardown`` if ``outcome`` is among its ``when``.

    Args:
        teardown: what to run (None: nothing).
        outcome: how the run ended (an :mod:`~colab_resume.exit_status` name).
        facts: the run's facts (``run_dir``, ``step``...); ``outcome`` is added.
        say: where a dry run or a refusal is reported.

    Returns:
        The command's exit status (0 for a callable that returned, or a dry
        run), 127 when it could not start, None when it was not run.
    """
    if teardown is None:
        return None
    if outcome not in teardown.when:
        say(
            f"on_done not run: the run ended {outcome}, and on_done runs only "
            f"after {', '.join(sorted(teardown.when))}"
        )
        return None
    env = environment({**facts, "outcome": outcome})
    dry = teardown.dry_run or os.environ.get(DRY_RUN_ENV, "") not in ("", "0")
    command = teardown.command
    if not isinstance(command, str):
        name = getattr(command, "__qualname__", repr(command))
        if dry:
            say(f"on_done (dry run): would call {name}()")
            return 0
        try:
            command({k: v for k, v in env.items() if k.startswith("COLAB_RESUME_")})
        except Exception as exc:  # the run is complete: report, do not undo it
            say(f"on_done: {name}() raised {type(exc).__name__}: {exc}")
            return 1
        return 0
    argv = shlex.split(command)
    if dry:
        say(f"on_done (dry run): would run {shlex.join(argv)}")
        return 0
    log.warning("on_done: running %s", shlex.join(argv))
    try:
        return subprocess.run(argv, env=env, check=False).returncode
    except OSError as exc:
        say(f"on_done: could not run {argv[0]!r}: {exc}")
        return 127
