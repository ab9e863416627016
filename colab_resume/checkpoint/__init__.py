"""Checkpoints that are never half-written (docs/DESIGN.md §4).

TensorFlow writes to a local staging directory; a background thread
uploads the files and commits ``MANIFEST.json`` last, create-only. Restore
takes the newest checkpoint that verifies against its manifest and falls
back to older ones. Importing this package does not import TensorFlow.
"""

from colab_resume.checkpoint.errors import (
    CheckpointError,
    FrozenArraysChangedError,
    NoValidCheckpointError,
    StructureMismatchError,
)
from colab_resume.checkpoint.manager import CheckpointConfig, CheckpointManager
from colab_resume.checkpoint.restore import RestoredInfo
from colab_resume.checkpoint.triggers import SaveTriggers, TriggerOptions
from colab_resume.protocol.manifest import Manifest

__all__ = [
    "CheckpointConfig",
    "CheckpointError",
    "CheckpointManager",
    "FrozenArraysChangedError",
    "Manifest",
    "NoValidCheckpointError",
    "RestoredInfo",
    "SaveTriggers",
    "StructureMismatchError",
    "TriggerOptions",
]
