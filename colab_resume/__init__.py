"""colab_resume: TensorFlow/Keras training runs that survive the hardware vanishing.

Importing this package never imports TensorFlow.
"""

from colab_resume._version import __version__
from colab_resume.agent import Agent, AgentOptions
from colab_resume.events import Event, EventLog
from colab_resume.heartbeat import RunSession, RunStatus, SessionOptions
from colab_resume.panel import panel
from colab_resume.status import inspect
from colab_resume.storage import authenticate

__all__ = [
    "Agent",
    "AgentOptions",
    "Event",
    "EventLog",
    "RunSession",
    "RunStatus",
    "SessionOptions",
    "__version__",
    "authenticate",
    "inspect",
    "panel",
]
