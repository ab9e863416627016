"""Whether a checkpoint fits the state being restored, group by group.

Positions, shapes and dtypes must match; names are only reported (Keras
renames the layers of a rebuilt model). Optional groups (compile metrics,
a loss scale) that do not fit are skipped with a warning. Pure: works on
the structures the checkpoint formats describe, never on variables.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from colab_resume.checkpoint.errors import StructureMismatchError

log = logging.getLogger(__name__)

# Groups whose absence or mismatch is tolerated on restore: Keras builds
# compile metrics lazily, so a fresh model may not have them yet, and they
# only affect the running averages shown mid-epoch, not training.
# The loss-scale variables of a LossScaleOptimizer (portable checkpoints
# only) exist under mixed_float16 alone: a run that changes its precision
# policy keeps its optimizer state and starts a fresh loss scale.
OPTIONAL_GROUPS = frozenset({"metrics"})
OPTIONAL_PREFIXES = ("loss_scale",)


def same_objects(listed: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """True when ``now`` holds the very objects ``listed`` does, group by group.

    A writer lists a state's variables once and reuses the list across
    saves; it must list them again once they change. Optimizers build their
    slots on their first step and Keras builds compile metrics lazily (the
    count grows), and ``model.compile`` gives the model a new optimizer,
    which for one of the same kind has as many variables as the old: so
    the variables are compared by identity, not counted.

    Args:
        listed: group -> list of variables (or an opaque object), as listed.
        now: the same, as the state stands now.
    """
    if listed.keys() != now.keys():
        return False
    for group, mine in listed.items():
        theirs = now[group]
        if isinstance(mine, list) and isinstance(theirs, list):
            if len(mine) != len(theirs) or any(
                a is not b for a, b in zip(mine, theirs, strict=True)
            ):
                return False
        elif mine is not theirs:
            return False
    return True


def check_fits(
    live: dict[str, Any], saved: dict[str, Any], *, metrics_pending: bool = False
) -> list[str]:
    """Compare the live state's structure with a checkpoint's, group by group.

    Args:
        live: the live state's structure (group -> descriptions).
        saved: the checkpoint's.
        metrics_pending: the live model's compiled metrics are not built yet
            (:func:`metrics_pending`): a ``metrics`` group with fewer
            variables than the checkpoint's is skipped without a warning.
            Nothing is lost: Keras resets metrics before the first batch of
            every ``fit`` epoch and ``evaluate``, and ``agent.fit`` puts a
            resumed epoch's running values back itself, warning if they do
            not fit (:mod:`colab_resume.agent.metric_state`).

    Returns:
        The optional groups that do not fit (skipped, with a warning).

    Raises:
        StructureMismatchError: a required group differs.
    """
    skipped: list[str] = []
    problems: list[str] = []
    for group in sorted(set(live) | set(saved)):
        diff = describe_difference(group, saved.get(group), live.get(group))
        if diff is None:
            continue
        if group in OPTIONAL_GROUPS or group.startswith(OPTIONAL_PREFIXES):
            skipped.append(group)
            unbuilt = (
                group == "metrics"
                and metrics_pending
                and len(live.get(group) or ()) < len(saved.get(group) or ())
            )
            level = logging.DEBUG if unbuilt else logging.WARNING
            log.log(level, "checkpoint: not restoring %s: %s", group, diff)
        else:
            problems.append(diff)
    if problems:
        raise StructureMismatchError(
            "The checkpoint does not fit the state being restored:\n  "
            + "\n  ".join(problems)
            + "\nBuild the same model and optimizer as the run that saved it "
            "(same layers in the same order, optimizer built on the same "
            "variables), or start a new run_dir."
        )
    return skipped


def describe_difference(group: str, saved: Any, live: Any) -> str | None:
    """One line naming how group ``group`` differs, or None if it fits."""
    if saved == live:
        return None
    if saved is None:
        return f"{group}: in the state being restored but not in the checkpoint"
    if live is None:
        return f"{group}: in the checkpoint but not in the state being restored"
    if isinstance(saved, str) or isinstance(live, str):
        if saved == live:
            return None
        return f"{group}: checkpoint has {saved!r}, state has {live!r}"
    lines: list[str] = []
    if len(saved) != len(live):
        lines.append(f"{len(saved)} variables in the checkpoint, {len(live)} now")
    for index, (old, new) in enumerate(zip(saved, live, strict=False)):
        # Names are not compared: Keras renames layers of a rebuilt model.
        if list(old[1]) != list(new[1]) or old[2] != new[2]:
            lines.append(
                f"#{index} checkpoint {old[0]} {old[2]}{list(old[1])} vs "
                f"now {new[0]} {new[2]}{list(new[1])}"
            )
    names_saved = {v[0] for v in saved}
    if len(saved) != len(live):
        only_saved = [v[0] for v in saved if v[0] not in {n[0] for n in live}]
        only_live = [v[0] for v in live if v[0] not in names_saved]
        if only_saved:
            lines.append(f"only in checkpoint: {only_saved[:8]}")
        if only_live:
            lines.append(f"only now: {only_live[:8]}")
    if not lines:
        return None  # same shapes and dtypes: only auto-generated names differ
    return f"{group}: " + "; ".join(lines[:10])
