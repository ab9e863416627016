"""colab_resume: Keras training runs that survive the hardware vanishing.

Importing this package never imports TensorFlow or JAX. Where only JAX is
installed (Colab's TPU runtime) and nothing chose a Keras backend, it
chooses JAX before Keras is imported (see
:func:`colab_resume.backend.current.choose_jax_where_tensorflow_is_absent`).
"""

from colab_resume._version import __version__
from colab_resume.agent import Agent, AgentOptions
from colab_resume.agent.callback import StartPoint
from colab_resume.agent.progress import Progress
from colab_resume.backend.current import (
    UnsupportedBackendError,
    choose_jax_where_tensorflow_is_absent,
)
from colab_resume.backend.jax_distributed import process_rows
from colab_resume.checkpoint.errors import (
    FrozenArraysChangedError,
    NoValidCheckpointError,
    StructureMismatchError,
)
from colab_resume.data import NonDeterministicDatasetError, PositionError
from colab_resume.errors import (
    ColabResumeError,
    FencedError,
    RunInUseError,
    StorageUnavailableError,
)
from colab_resume.events import Event, EventLog
from colab_resume.exit_status import Preempted, exit_code
from colab_resume.heartbeat import RunSession, RunStatus, SessionOptions
from colab_resume.launch.identity import NoRunDirError
from colab_resume.launch.teardown import Teardown
from colab_resume.panel import panel
from colab_resume.status import inspect
from colab_resume.storage import authenticate

# None of the imports above imports Keras: it is not too late to choose.
choose_jax_where_tensorflow_is_absent()

__all__ = [
    "Agent",
    "AgentOptions",
    "ColabResumeError",
    "Event",
    "EventLog",
    "FencedError",
    "FrozenArraysChangedError",
    "NoRunDirError",
    "NoValidCheckpointError",
    "NonDeterministicDatasetError",
    "PositionError",
    "Preempted",
    "Progress",
    "ResumeCallback",
    "RunInUseError",
    "RunSession",
    "RunStatus",
    "SessionOptions",
    "StartPoint",
    "StorageUnavailableError",
    "StructureMismatchError",
    "Teardown",
    "UnsupportedBackendError",
    "__version__",
    "authenticate",
    "exit_code",
    "inspect",
    "panel",
    "process_rows",
]


def __getattr__(name: str) -> object:
    # ResumeCallback subclasses keras.callbacks.Callback: built on first use,
    # so that importing colab_resume never imports Keras or TensorFlow.
    if name == "ResumeCallback":
        from colab_resume.agent.callback import resume_callback_class

        return resume_callback_class()
    if name == "trackers":  # cr.trackers: experiment trackers, on first use
        return __import__("colab_resume.trackers", fromlist=["tensorboard"])
    raise AttributeError(f"module 'colab_resume' has no attribute {name!r}")
