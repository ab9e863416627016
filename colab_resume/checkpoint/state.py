"""What a checkpoint captures, in an order that survives a rebuilt model.

``tf.train.Checkpoint(model=model)`` keys variables by the object graph and
misses Keras 3's Dropout ``seed_generator_state``. We instead save *every*
entry of ``model.variables`` and ``optimizer.variables``, keyed by group and
position (``model/000003``). A model rebuilt in a fresh strategy scope
(another process, or this one after a reconnect) lists its variables in the
same order, though Keras may give them new auto-generated names
(``dense_1`` becomes ``dense_7``); so positions, shapes and dtypes must
match, names are only reported.

TensorFlow is imported lazily: importing the package must not pay for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from colab_resume import backend
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

StateLike = Any  # a keras.Model, ModelAndExtras, or a mapping of name -> trackable


@dataclasses.dataclass(frozen=True, eq=False)
class ModelAndExtras:
    """A model plus extra groups of variables saved with it.

    Attributes:
        model: the ``keras.Model`` (saved as for a bare model).
        extras: group name -> what to save with it (a list of variables, a
            variable, an optimizer, a ``tf.random.Generator``...), e.g. the
            agent's copies of callbacks' arrays.
    """

    model: Any
    extras: Mapping[str, Any]


def _tensorflow() -> Any:
    """TensorFlow on its backend; None on JAX, whose path never imports it."""
    if backend.current().portable_only:
        return None
    import tensorflow as tf

    return tf


class _NoStrategy:
    """JAX: the global ``keras.distribution`` lays variables out by itself."""

    def scope(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def _variable_list(obj: Any) -> list[Any] | None:
    """The variables of ``obj`` if it is one we flatten, else None (opaque)."""
    import keras

    tf = _tensorflow()
    kinds = (keras.Variable, tf.Variable) if tf is not None else (keras.Variable,)
    if isinstance(obj, (keras.Layer, keras.optimizers.Optimizer, keras.metrics.Metric)):
        return list(obj.variables)
    if isinstance(obj, kinds):
        return [obj]
    if isinstance(obj, (list, tuple)) and all(isinstance(v, kinds) for v in obj):
        return list(obj)
    return None


def _tf_variable(variable: Any) -> Any:
    """See :func:`colab_resume.backend.tensorflow.tf_variable`."""
    from colab_resume.backend.tensorflow import tf_variable

    return tf_variable(variable)


def _describe(variable: Any) -> list[Any]:
    name = getattr(variable, "path", None) or variable.name
    return [str(name), [int(d) for d in variable.shape], str(variable.dtype)]


def _build_optimizer(
    optimizer: Any, models: list[Any], variables: list[Any] | None = None
) -> None:
    """Create the optimizer's slot variables so they can be saved or restored.

    Keras builds them lazily on the first step; a fresh optimizer about to be
    restored has none, and a checkpoint with slots would not fit it.

    Args:
        optimizer: built on ``variables`` if given, else on the trainable
            variables of ``models``.
    """
    if getattr(optimizer, "built", True) or not models:
        return
    if variables is None:
        variables = [v for model in models for v in model.trainable_variables]
    with _strategy_of(models[0]).scope():
        optimizer.build(variables)


def _strategy_of(model: Any) -> Any:
    tf = _tensorflow()
    if tf is None:
        return _NoStrategy()
    return getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()


def _descriptions(optimizer: Any) -> list[Any]:
    return [_describe(v) for v in optimizer.variables]


def _model_of(state: StateLike) -> Any:
    return state.model if isinstance(state, ModelAndExtras) else state


def _candidate_variable_lists(model: Any) -> Iterator[list[Any]]:
    """Trainable variables of every layer reachable from ``model``, itself first."""
    import keras

    if not isinstance(model, keras.Layer):
        return
    seen: set[int] = set()
    pending = [model]
    while pending:
        layer = pending.pop(0)
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if layer.trainable_variables:
            yield list(layer.trainable_variables)
        pending.extend(v for _, v in _attributes(layer) if isinstance(v, keras.Layer))


def _attributes(obj: Any) -> Iterator[tuple[str, Any]]:
    """``obj``'s attributes, with the items of lists, tuples and dicts."""
    for name, value in vars(obj).items():
        if isinstance(value, (list, tuple)):
            yield from ((f"{name}_{i}", v) for i, v in enumerate(value))
        elif isinstance(value, dict):
            yield from ((f"{name}_{k}", v) for k, v in value.items())
        else:
            yield name, value


def _untracked(model: Any) -> tuple[dict[str, Any], list[Any]]:
    """What ``model.variables`` misses but training changes.

    Walks the model's layers (tracked by Keras or not) for optimizers kept as
    attributes (a GAN's ``d_optimizer``), ``tf.random.Generator`` states and
    ``SeedGenerator`` states Keras does not track.

    Returns:
        Attribute optimizers by attribute name, and the stray RNG variables.
    """
    import keras

    tf = _tensorflow()
    generator = tf.random.Generator if tf is not None else ()
    known = {id(v) for v in model.variables}
    optimizers: dict[str, Any] = {}
    rng: list[Any] = []
    seen: set[int] = set()

    def walk(layer: Any) -> None:
        if id(layer) in seen:
            return
        seen.add(id(layer))
        for name, value in _attributes(layer):
            if isinstance(value, keras.Layer):
                walk(value)
            elif isinstance(value, keras.optimizers.Optimizer):
                if value is not model.optimizer and layer is model:
                    optimizers.setdefault(name, value)
            elif generator and isinstance(value, generator):
                if id(value.state) not in known:
                    known.add(id(value.state))
                    rng.append(value.state)
            elif isinstance(value, keras.random.SeedGenerator):
                if id(value.state) not in known:
                    known.add(id(value.state))
                    rng.append(value.state)

    walk(model)
    return optimizers, rng


def expand(state: StateLike) -> dict[str, Any]:
    """Turn a keras Model or a mapping into named groups.

    A Model becomes ``model``, ``optimizer`` (its compiled optimizer, built if
    needed), ``metrics`` (the compiled metrics' state, where present), one
    ``optimizer_<attribute>`` group per optimizer the model keeps as an
    attribute, and ``rng`` for random-generator states Keras does not track.
    """
    import keras

    groups: dict[str, Any]
    if isinstance(state, ModelAndExtras):
        with_extras = expand(state.model)
        with_extras.update(state.extras)
        return with_extras
    if isinstance(state, keras.Model):
        groups = {"model": state}
        optimizer = getattr(state, "optimizer", None)
        if optimizer is not None:
            _build_optimizer(optimizer, [state])
            groups["optimizer"] = optimizer
        metric_vars = [v for metric in state.metrics for v in metric.variables]
        if metric_vars:
            groups["metrics"] = metric_vars
        optimizers, rng = _untracked(state)
        for name, attribute_optimizer in optimizers.items():
            groups[f"optimizer_{name}"] = attribute_optimizer
        if rng:
            groups["rng"] = rng
        return groups
    if isinstance(state, Mapping):
        if not state:
            raise ValueError("state must name at least one trackable, got {}.")
        for key in state:
            if not isinstance(key, str) or not key.isidentifier():
                raise ValueError(
                    f"state keys must be identifiers such as 'model' or 'rng', "
                    f"got {key!r}."
                )
        models = [v for v in state.values() if isinstance(v, keras.Model)]
        for value in state.values():
            if isinstance(value, keras.optimizers.Optimizer):
                _build_optimizer(value, models)
        return dict(state)
    raise TypeError(
        f"state must be a keras.Model or a dict of trackables (name -> model, "
        f"optimizer, tf.Variable, tf.random.Generator, ...), got "
        f"{type(state).__name__}."
    )


class TrainingState:
    """The trackables of one training setup, ready to write or read.

    Args:
        state: a ``keras.Model`` (with its optimizer and metrics) or a mapping
            of name to trackable.
    """

    def __init__(self, state: StateLike) -> None:
        self.source = state
        self._setup()

    def _setup(self) -> None:
        import tensorflow as tf

        state = self.source
        self._groups: dict[str, Any] = {}
        self.structure: dict[str, Any] = {}
        children: dict[str, Any] = {}
        for group, obj in expand(state).items():
            variables = _variable_list(obj)
            if variables is None:
                self._groups[group] = obj
                self.structure[group] = f"object:{type(obj).__name__}"
                children[group] = obj
            else:
                self._groups[group] = variables
                self.structure[group] = [_describe(v) for v in variables]
                children[group] = {
                    f"{i:06d}": _tf_variable(v) for i, v in enumerate(variables)
                }
        self._children = children
        # One Checkpoint object for the life of this state: TF's async
        # checkpointing keeps its writer thread on it.
        self.checkpoint = tf.train.Checkpoint(**children)

    def outdated(self) -> bool:
        """True once the state's variables are not the ones this object lists.

        See :func:`same_objects`: slots built, metrics built, or a recompile.
        """
        now: dict[str, Any] = {}
        for group, obj in expand(self.source).items():
            variables = _variable_list(obj)
            now[group] = obj if variables is None else variables
        return not same_objects(self._groups, now)

    @property
    def nbytes(self) -> int:
        """Approximate bytes of the variables (opaque trackables excluded)."""
        total = 0
        for variables in self._groups.values():
            if isinstance(variables, list):
                for v in variables:
                    total += int(v.shape.num_elements() or 0) * v.dtype.size
        return total

    def write(self, prefix: str, options: Any) -> None:
        """Write the checkpoint files ``prefix.index`` / ``prefix.data-*``."""
        self.checkpoint.write(prefix, options=options)

    def sync(self) -> None:
        """Wait for an asynchronous write to reach the local disk."""
        sync = getattr(self.checkpoint, "sync", None)
        if sync is not None:
            sync()

    def restore(
        self,
        prefix: str,
        saved: dict[str, Any],
        options: Any,
        files: Sequence[Any] | None = None,
    ) -> list[str]:
        """Read ``prefix`` into the live variables.

        Args:
            prefix: local checkpoint prefix.
            saved: the structure recorded in the manifest.
            options: ``tf.train.CheckpointOptions``.
            files: the manifest's file entries; unused: TensorFlow's reader
                checks each tensor against the CRC32C its index records.

        Returns:
            Optional groups that were skipped because they did not match.

        Raises:
            StructureMismatchError: a required group differs.
        """
        import tensorflow as tf

        if build_pending_optimizers(self.source, self.structure, saved):
            self._setup()
        skipped = check_fits(
            self.structure, saved, metrics_pending=metrics_pending(self.source)
        )
        if skipped:
            children = {k: v for k, v in self._children.items() if k not in skipped}
            reader = tf.train.Checkpoint(**children)
        else:
            reader = self.checkpoint  # reuses TF's cached restore functions
        status = reader.read(prefix, options=options)
        status.expect_partial()
        status.assert_existing_objects_matched()
        return skipped


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


def build_pending_optimizers(
    source: StateLike, structure: dict[str, Any], saved: dict[str, Any]
) -> bool:
    """Build slot-less attribute optimizers the way the checkpoint's were.

    A GAN's ``d_optimizer`` is built on its first step, on variables only
    its ``train_step`` knows. So every layer's trainable variables are
    tried on a throwaway copy, and the real optimizer is built on the
    first candidate whose variables match the checkpoint's shapes.

    Args:
        source: the live state.
        structure: its structure now (group -> descriptions).
        saved: the checkpoint's structure.

    Returns:
        Whether an optimizer was built (the caller lists its state again).
    """
    import keras

    changed = False
    for group, mine in structure.items():
        if not isinstance(mine, list) or not group.startswith("optimizer_"):
            continue
        optimizer = expand(source).get(group)
        theirs = saved.get(group)
        if (
            not isinstance(optimizer, keras.optimizers.Optimizer)
            or getattr(optimizer, "built", True)
            or not isinstance(theirs, list)
            or len(theirs) <= len(mine)
        ):
            continue
        model = _model_of(source)
        for candidate in _candidate_variable_lists(model):
            with _strategy_of(model).scope():
                probe = keras.optimizers.deserialize(
                    keras.optimizers.serialize(optimizer)
                )
                probe.build(candidate)
            if describe_difference(group, theirs, _descriptions(probe)) is None:
                _build_optimizer(optimizer, [model], candidate)
                changed = True
                break
    return changed


def metrics_pending(state: StateLike) -> bool:
    """Whether the model in ``state`` has compiled metrics Keras has not built.

    Keras creates the variables of ``compile(metrics=...)`` on the model's
    first step (``fit`` builds them before it), so a freshly built model
    lists only its loss tracker's.
    """
    import keras

    model = _model_of(state)
    if not isinstance(model, keras.Model):
        return False
    # Keras 3 keeps them in a private CompileMetrics; no public flag says so.
    compiled = getattr(model, "_compile_metrics", None)
    return compiled is not None and not getattr(compiled, "built", True)


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
