"""What ``make_dataset`` owes the agent: its errors and its ``skip`` keyword.

Below both the epochs' positions and fingerprints
(:mod:`colab_resume.agent.epochs`, :mod:`colab_resume.agent.fingerprints`)
and the backends (which build an epoch their own way), which both import it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from colab_resume.errors import ColabResumeError


class DatasetError(ColabResumeError, ValueError):
    """``make_dataset`` returned something unusable."""


class NonDeterministicDatasetError(DatasetError):
    """``make_dataset(epoch)`` gave different batches before and after a restart."""


class PositionError(DatasetError):
    """A resume's first batch is not the batch the run trained there
    (:mod:`colab_resume.agent.proof`)."""


def accepts_skip(make_dataset: Callable[..., Any]) -> bool:
    """True when ``make_dataset`` takes a ``skip`` keyword (it skips index-first)."""
    try:
        parameters = inspect.signature(make_dataset).parameters
    except (TypeError, ValueError):
        return False
    return "skip" in parameters
