"""Who owns a run and whether it is alive: leases, heartbeats, liveness."""

from colab_resume.heartbeat.liveness import (
    ALIVE,
    COMPLETED,
    DEAD,
    FAILED,
    NEW,
    STALLED,
    STATES,
    STOPPED,
    RunStatus,
    read_status,
)
from colab_resume.heartbeat.session import RunSession, SessionOptions

__all__ = [
    "ALIVE",
    "COMPLETED",
    "DEAD",
    "FAILED",
    "NEW",
    "STALLED",
    "STATES",
    "STOPPED",
    "RunSession",
    "RunStatus",
    "SessionOptions",
    "read_status",
]
