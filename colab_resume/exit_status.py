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
PREEMPTED  143    restart it: SIGTERM or a preemption notice, after the
                  final checkpoint (128 + SIGTERM, the shell convention)
========== ====== ============================================================

Pure constants: nothing here exits.
"""

from __future__ import annotations

COMPLETED = 0
FAILED = 1
STOPPED = 5
RESTART = 75
PREEMPTED = 143

NAMES = {
    COMPLETED: "COMPLETED",
    FAILED: "FAILED",
    STOPPED: "STOPPED",
    RESTART: "RESTART",
    PREEMPTED: "PREEMPTED",
}
