"""Looking inside a ``tf.data`` pipeline: its datasets and their functions' graphs.

Best effort over TensorFlow's dataset internals (each dataset's
``_inputs()`` and ``_functions()``), used to judge a pipeline before it
runs: how much it embeds (:mod:`colab_resume.data_cost`) and whether it
yields the same batches every time it is iterated
(:mod:`colab_resume.agent.spans`). A part it cannot read is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Ops whose output may differ from one run of a function to the next: the
# stateful random ops, tf.random.Generator's, and Python code (py_function,
# numpy_function, Dataset.from_generator).
_STATEFUL_MARKS = ("Random", "Rng", "Stateful", "PyFunc", "Generator")


def datasets(dataset: Any) -> Iterator[Any]:
    """``dataset`` and every dataset it reads from, each once."""
    pending, seen = [dataset], set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        try:
            pending.extend(node._inputs())
        except Exception:  # not a tf.data dataset we know how to read
            continue


def graphs(dataset: Any) -> Iterator[Any]:
    """The graphs of the functions of ``dataset`` and of its inputs (``map``...)."""
    for node in datasets(dataset):
        try:
            functions = list(node._functions())
        except Exception:
            continue
        for wrapper in functions:
            graph = getattr(getattr(wrapper, "function", None), "graph", None)
            if graph is not None:
                yield graph


def operations(graph: Any) -> list[Any]:
    try:
        return list(graph.get_operations())
    except Exception:  # a graph we cannot walk
        return []


def same_every_iteration(dataset: Any) -> bool:
    """True when iterating ``dataset`` again yields the same batches, as far
    as can be told without running it.

    False for a ``shuffle`` that changes order at each iteration (its
    default), a ``Dataset.random`` asked to, a stateful random op or Python
    code in one of its functions, or a part that cannot be read.
    """
    for node in datasets(dataset):
        if getattr(node, "_reshuffle_each_iteration", False) is not False:
            return False
        if getattr(node, "_rerandomize", False):
            return False
        try:  # datasets() and graphs() pass over what they cannot read
            node._inputs()
            functions = list(node._functions())
        except Exception:
            return False
        for wrapper in functions:
            if not _same_every_run(getattr(wrapper, "function", None)):
                return False
    return True


def _same_every_run(function: Any) -> bool:
    """True when a dataset function's graph holds nothing that can change
    between its runs; False also for a graph that cannot be read."""
    try:
        ops = list(function.graph.get_operations())
    except Exception:
        return False
    for op in ops:
        kind = op.type
        if "Shuffle" in kind and _attr(op, "reshuffle_each_iteration", True):
            return False
        if any(mark in kind for mark in _STATEFUL_MARKS) and not kind.startswith(
            "Stateless"
        ):
            return False
    return True


def _attr(op: Any, name: str, default: Any) -> Any:
    try:
        return op.get_attr(name)
    except Exception:
        return default
