"""What a checkpoint captures: the state's groups of variables, in an order
that survives a rebuilt model.

``tf.train.Checkpoint(model=model)`` keys variables by the object graph and
misses Keras 3's Dropout ``seed_generator_state``. We instead save *every*
entry of ``model.variables`` and ``optimizer.variables``, keyed by group and
position (``model/000003``). A model rebuilt in a fresh strategy scope
(another process, or this one after a reconnect) lists its variables in the
same order, though Keras may give them new auto-generated names
(``dense_1`` becomes ``dense_7``); so positions, shapes and dtypes must
match, names are only reported (:mod:`colab_resume.checkpoint.structure`).

Both checkpoint formats start here: the portable one
(:mod:`colab_resume.checkpoint.formats.portable`) and TensorFlow's own
(:mod:`colab_resume.checkpoint.formats.tensorflow`). What only a framework knows (its
own variable and random-generator types, its distribution scope) is asked
of the current backend; this module imports none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, cast

from colab_resume import backend
from colab_resume.checkpoint.structure import describe_difference

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


def variable_list(obj: Any) -> list[Any] | None:
    """The variables of ``obj`` if it is one we flatten, else None (opaque)."""
    import keras

    kinds = (keras.Variable, *backend.current().variable_types())
    if isinstance(obj, (keras.Layer, keras.optimizers.Optimizer, keras.metrics.Metric)):
        return list(obj.variables)
    if isinstance(obj, kinds):
        return [obj]
    if isinstance(obj, (list, tuple)) and all(isinstance(v, kinds) for v in obj):
        return list(obj)
    return None


def describe(variable: Any) -> list[Any]:
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
    with backend.current().variable_scope(models[0]):
        optimizer.build(variables)


def _descriptions(optimizer: Any) -> list[Any]:
    return [describe(v) for v in optimizer.variables]


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

    # Random generators whose state is a variable: the framework's own
    # (tf.random.Generator) and Keras' SeedGenerator.
    generators = (*backend.current().generator_types(), keras.random.SeedGenerator)
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
            elif isinstance(value, generators):
                state = cast(Any, value).state
                if id(state) not in known:
                    known.add(id(state))
                    rng.append(state)

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
            with backend.current().variable_scope(model):
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
