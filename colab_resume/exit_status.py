"""The process exit statuses a launcher acts on, stated once.

A launcher that restarts preempted jobs (SkyPilot managed jobs, Vertex AI,
a Kubernetes JobSet's ``failurePolicy``, a shell loop) reads only the exit
status, so each way a training script can end has its own:

========== ====== ============================================================
status     value  what the launcher should do
========== ====== ============================================================
COMPLETED  0      nothing: training reached its planned end (``DONE.json``)
FAILED     1      do not restart blindly: a bug or bad input (Python's own
                  status for an uncaught exception)
STOPPED    5      nothing: someone asked it to stop (``stop()``, the panel);
                  the same number ``colab-resume watch`` uses for STOPPED
RESTART    75     restart every process of the job: a peer host of a
                  multi-host run died (``EX_TEMPFAIL``: try again)
MISMATCH   78     do not restart: the processes of one multi-host run were
                  started with different settings (run directory, options,
                  epochs, model); every process names the setting and each
                  process's value (``EX_CONFIG``). Fix the launch
(134)      134    not ours: in a multi-process JAX job, the survivors of the
                  coordinator's (process 0's) death are aborted by JAX itself
                  (SIGABRT) before any Python code runs. A launcher of a
                  multi-process job treats 134 like 75: restart every process
PREEMPTED  143    restart it: SIGTERM or a preemption notice, after the
                  final checkpoint (128 + SIGTERM, the shell convention)
========== ====== ============================================================

The commands that follow a run from outside it (``colab-resume watch``,
``colab-resume supervise``) end with the run's state, not a script's:

============ ====== ==========================================================
state        value  meaning
============ ====== ==========================================================
COMPLETED    0      the run reached its planned end
DEAD         3      its holder went silent (``watch`` only: ``supervise``
                    relaunches it)
FAILED       4      its holder stopped on an error in the user's code
STOPPED      5      a person or a SIGTERM stopped it
UNREADABLE   6      the run directory cannot be read (``watch``)
GAVE_UP      8      ``supervise`` reached a limit (a crash loop, the
                    relaunches allowed a day)
SUPERSEDED   9      a newer live supervisor took the run over
============ ====== ==========================================================

The constants, the two tables (:data:`WATCH_EXIT`, :data:`SUPERVISE_EXIT`),
and the exception that carries PREEMPTED out of a script
(:class:`Preempted`); nothing here exits by itself.
"""

from __future__ import annotations

COMPLETED = 0
FAILED = 1
STOPPED = 5
RESTART = 75
MISMATCH = 78
PREEMPTED = 143

# A watcher's statuses, by the run state it ends on (the state names of
# colab_resume.heartbeat.liveness, spelled here so this floor imports none).
RUN_DEAD = 3
RUN_FAILED = 4
RUN_UNREADABLE = 6
GAVE_UP = 8
SUPERSEDED = 9
WATCH_EXIT = {
    "COMPLETED": COMPLETED,
    "DEAD": RUN_DEAD,
    "FAILED": RUN_FAILED,
    "STOPPED": STOPPED,
    "UNREADABLE": RUN_UNREADABLE,
}
# A supervisor ends on every end state but DEAD, which it relaunches.
SUPERVISE_EXIT = {
    state: code
    for state, code in WATCH_EXIT.items()
    if state in ("COMPLETED", "FAILED", "STOPPED")
}

NAMES = {
    COMPLETED: "COMPLETED",
    FAILED: "FAILED",
    STOPPED: "STOPPED",
    RESTART: "RESTART",
    MISMATCH: "MISMATCH",
    PREEMPTED: "PREEMPTED",
}


class ProcessesDisagree(SystemExit):
    """The processes of one run were started with different settings: exit
    :data:`MISMATCH`, which no launcher should restart on (a restart would
    start them the same way again). The message names the setting and each
    process's value; it was printed to stderr and is the run's error.
    """

    def __init__(self, message: str) -> None:
        super().__init__(MISMATCH)
        self.message = message

    def __str__(self) -> str:
        return self.message


class Preempted(SystemExit):
    """SIGTERM or a preemption notice ended the run: exit :data:`PREEMPTED`.

    A :class:`SystemExit`, so an uncaught one ends a script with status 143
    and no traceback (Python prints nothing for an integer ``SystemExit``),
    and ``except Exception`` in user code does not swallow it. Raised by
    ``Agent.fit``/``Agent.run`` after the final commit, only where
    ``exit_on_preemption`` allows (by default: outside an IPython kernel).
    Catch it to run your own code first, then re-raise it.

    A run that ``stop()`` ended is not preempted: someone asked, and
    ``fit`` returns as it always did (:func:`exit_code` says STOPPED).

    Attributes:
        code: the exit status, :data:`PREEMPTED`.
        step: the step of the committed checkpoint it ended at.
        reason: what ended it (``"SIGTERM"``, ``"metadata: preempted"``).
    """

    def __init__(self, step: int | None, reason: str) -> None:
        super().__init__(PREEMPTED)
        self.step = step
        self.reason = reason

    def __str__(self) -> str:
        return f"PREEMPTED at step {self.step} ({self.reason}); exit status {PREEMPTED}"


def in_kernel() -> bool:
    """True inside an IPython kernel (a notebook), where nothing should exit.

    Read from ``sys.modules`` only: a script that never imported IPython is
    not in a kernel, and asking costs no import.
    """
    import sys

    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return False
    shell = ipython.get_ipython()
    return getattr(shell, "kernel", None) is not None


def exit_code(agent: object) -> int:
    """The exit status for how ``agent``'s last ``fit``/``run`` ended.

    For a script that keeps its own top level (``exit_on_preemption=False``)::

        agent.fit(...)
        sys.exit(cr.exit_code(agent))

    An agent whose last call raised is :data:`FAILED`; one that never
    trained is :data:`COMPLETED` (nothing to redo).
    """
    outcome = getattr(agent, "outcome", None)
    by_name = {name: value for value, name in NAMES.items()}
    return by_name.get(outcome, COMPLETED) if isinstance(outcome, str) else COMPLETED
