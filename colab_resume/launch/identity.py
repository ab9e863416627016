"""The run's identity from the launcher: its run directory, the same after a restart.

``cr.Agent()`` without a run directory asks :func:`run_dir_from_environment`,
which takes the first of these that is set:

1. ``COLAB_RESUME_RUN_DIR``: the run directory itself (any launcher, a
   shell loop, Kaggle, a JobSet's pod template).
2. ``AIP_CHECKPOINT_DIR``: Vertex AI custom jobs hand it to the container
   (``gs://BUCKET/OUTPUT/checkpoints/`` under the job's
   ``baseOutputDirectory``); the same for every restart of the job.
3. ``SKYPILOT_TASK_ID`` under ``COLAB_RESUME_BASE_DIR``: SkyPilot keeps the
   task id across a managed job's recoveries, so
   ``COLAB_RESUME_BASE_DIR/<task id>`` is the same run after each one (an
   id with characters a store may not take: :func:`task_folder`).

A variable that is set but empty counts as unset. The choice is logged in
one line; none set raises :class:`NoRunDirError` naming what was read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
from collections.abc import Mapping

from colab_resume.errors import ColabResumeError

log = logging.getLogger(__name__)

RUN_DIR = "COLAB_RESUME_RUN_DIR"
BASE_DIR = "COLAB_RESUME_BASE_DIR"
VERTEX = "AIP_CHECKPOINT_DIR"
SKYPILOT = "SKYPILOT_TASK_ID"
ORDER = (RUN_DIR, VERTEX, f"{SKYPILOT} under {BASE_DIR}")
# A task id is SkyPilot's, not ours: keep it to characters every store takes.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


class NoRunDirError(ColabResumeError, ValueError):
    """No run directory was given, and the launcher's environment names none."""


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """Where the run lives and why.

    Attributes:
        run_dir: the run directory's URL or path.
        source: the variable(s) it came from (``"AIP_CHECKPOINT_DIR"``...).
    """

    run_dir: str
    source: str

    def describe(self) -> str:
        return f"run directory {self.run_dir} (from {self.source})"


def _joined(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}"


def task_folder(task_id: str) -> str:
    """The run directory's name for a launcher's task id: one name per id.

    An id of characters every store takes is its own name. Any other is
    made readable (runs of other characters become ``-``) and given
    ``~`` and a hash of the whole id: ``~`` is in no name of the first
    kind, and the hash tells apart ids that read alike (``a/b``, ``a b``),
    so two tasks never share a run.
    """
    if _SAFE.fullmatch(task_id) and task_id not in (".", ".."):
        return task_id
    readable = _UNSAFE.sub("-", task_id).strip("-.") or "task"
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{readable[:80]}~{digest[:12]}"


def run_dir_from_environment(env: Mapping[str, str] | None = None) -> RunIdentity:
    """The run directory the launcher's environment names (see the module doc).

    Raises:
        NoRunDirError: none of the variables is set (the message lists them
            and what to set), or ``SKYPILOT_TASK_ID`` is set without
            ``COLAB_RESUME_BASE_DIR``.
    """
    env = os.environ if env is None else env

    def get(name: str) -> str:
        return env.get(name, "").strip()

    if get(RUN_DIR):
        found = RunIdentity(get(RUN_DIR), RUN_DIR)
    elif get(VERTEX):
        found = RunIdentity(get(VERTEX).rstrip("/"), VERTEX)
    elif get(SKYPILOT):
        if not get(BASE_DIR):
            raise NoRunDirError(
                f"{SKYPILOT} is set ({get(SKYPILOT)!r}) but {BASE_DIR} is not: set "
                f"{BASE_DIR} to where runs live (e.g. gs://BUCKET/runs) in the "
                f"task's envs, and the run is {BASE_DIR}/<task id>, the same after "
                f"every recovery. Or set {RUN_DIR}."
            )
        found = RunIdentity(
            _joined(get(BASE_DIR), task_folder(get(SKYPILOT))),
            f"{SKYPILOT} under {BASE_DIR}",
        )
    else:
        raise NoRunDirError(
            "no run directory: cr.Agent() was given none, and the environment "
            f"sets none of {', '.join(ORDER)}. Pass one "
            "(cr.Agent('gs://BUCKET/runs/NAME')) or set "
            f"{RUN_DIR}=gs://BUCKET/runs/NAME."
        )
    log.info("colab_resume: %s", found.describe())
    return found
