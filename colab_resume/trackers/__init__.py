"""Experiment trackers that see one run across sessions.

``cr.trackers.tensorboard(agent, log_dir)``, ``cr.trackers.mlflow_run(agent,
...)`` and ``cr.trackers.wandb_run(agent, ...)`` give each tracker the run's
identity from the run directory, log at the run's step, and keep the steps
a killed session logged after its last checkpoint from being logged twice.
See ``docs/guide/trackers.md``. Importing this package imports none of
Keras, MLflow or W&B: each is imported when first used, and a missing one
says which pip line installs it.
"""

from colab_resume.trackers.identity import read_identity
from colab_resume.trackers.mlflow_run import MlflowRun, mlflow_run
from colab_resume.trackers.tensorboard_log import tensorboard
from colab_resume.trackers.wandb_run import WandbRun, wandb_run

__all__ = [
    "MlflowRun",
    "WandbRun",
    "mlflow_run",
    "read_identity",
    "tensorboard",
    "wandb_run",
]
