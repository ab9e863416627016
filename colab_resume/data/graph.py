"""Looking inside a ``tf.data`` pipeline: its datasets and their functions' graphs.

Best effort over TensorFlow's dataset internals (each dataset's
``_inputs()`` and ``_functions()``), used to judge a pipeline before it
runs: how much it embeds (:mod:`colab_resume.data.cost`) and whether it
yields the same batches every time it is iterated
(:mod:`colab_resume.agent.spans`). The helpers skip a part they cannot
read; :func:`same_every_iteration` says no for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from colab_resume.data import repeatable


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
    """True when iterating ``dataset`` again is known to yield the same batches.

    Judged without running it, against an allow-list
    (:mod:`colab_resume.data.repeatable`): every dataset of the pipeline must be
    of a kind known to repeat, with settings that do (a ``shuffle`` that
    does not reshuffle at each iteration, a parallel ``map`` in order...),
    and every op of its functions, and of the functions they call, must be
    known to depend on its inputs alone. Anything else, a part it cannot
    read included, is no: a stateful random op, a Keras random layer (its
    seed is a variable it advances), Python code, an op it does not know.
    """
    try:
        if dataset.options().deterministic is False:  # parallel ops reorder
            return False
    except Exception:
        return False
    for node in datasets(dataset):
        if not repeatable.dataset_repeats(node):
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
    """True when every op of a dataset function's graph, and of the
    functions it calls at any depth, is on the allow-list; False also for
    a graph that cannot be read."""
    try:
        graph = function.graph
        # A FuncGraph holds every function called from it, however deep.
        graphs = [graph, *(called.graph for called in graph._functions.values())]
        ops = [op for each in graphs for op in each.get_operations()]
    except Exception:  # no graph to read (a function loaded from disk...)
        return False
    return all(repeatable.op_repeats(op.type, op.get_attr) for op in ops)
