"""What rebuilding an epoch's dataset costs, and one warning when it is too much.

The agent calls ``make_dataset(epoch)`` at every epoch and every resume
(:mod:`colab_resume.agent.epochs`), where plain Keras ``fit`` iterates one dataset
again. That is cheap for an index-first pipeline, and ruinous for a common
one: a NumPy array used inside ``Dataset.map`` (``tf.gather(x, i)`` with
``x`` a NumPy array) is embedded in the map function's graph as a constant
each time the function is traced — every call of ``make_dataset`` copies
the whole array into a new graph, and TensorFlow copies it again while it
optimises and instantiates that graph: for MNIST-sized arrays (60000 x 784
float32, 188 MB) seconds and gigabytes per epoch. A tensor made once,
outside ``make_dataset`` (``x = tf.constant(x)``), is captured by
reference instead and costs nothing per rebuild.

:class:`RebuildWatch` looks at each epoch's dataset as it is built: large
constants in its functions' graphs, or a build plus first batch that takes
seconds, give one warning per run naming the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from colab_resume.data import graph as dataset_graph

# A constant this large in a dataset function is an array that should have
# been a tensor made once; small lookup tables stay below it.
LARGE_CONSTANT_BYTES = 16 << 20
# Building the epoch's dataset and drawing its first batch slower than this
# is worth a warning whatever the cause: it is paid every epoch.
SLOW_REBUILD_SECONDS = 5.0

FIX = (
    "Make the arrays tensors once, outside make_dataset (x = tf.constant(x); "
    "y = tf.constant(y)) and use those inside Dataset.map: a tensor is "
    "captured by reference, a NumPy array is copied into the graph at every "
    "call."
)


def embedded_constant_bytes(dataset: Any) -> int:
    """Bytes of the constants in the graphs of ``dataset``'s functions and its inputs'.

    Best effort (:mod:`colab_resume.data.graph`); anything it cannot
    read counts as 0.
    """
    total = 0
    for graph in dataset_graph.graphs(dataset):
        for op in dataset_graph.operations(graph):
            if op.type != "Const":
                continue
            try:
                output = op.outputs[0]
                elements = output.shape.num_elements()
                total += elements * output.dtype.size if elements else 0
            except Exception:  # not a reason to fail training
                continue
    return total


class RebuildWatch:
    """Warns (once) about a ``make_dataset`` that is expensive to call per epoch.

    Args:
        warn: where the warning goes (the agent's ``fit.warning`` event).
    """

    def __init__(self, warn: Callable[[str], object]) -> None:
        self._warn = warn
        self.warned = False

    def check(self, dataset: Any, *, epoch: int, seconds: float) -> str | None:
        """Look at ``make_dataset(epoch)``'s result, built in ``seconds``.

        Returns:
            The warning given, or None.
        """
        if self.warned:
            return None
        message = describe(dataset, epoch=epoch, seconds=seconds)
        if message is not None:
            self.warned = True
            self._warn(message)
        return message


def describe(dataset: Any, *, epoch: int, seconds: float) -> str | None:
    """The warning for an expensive rebuild, or None when it is cheap."""
    constants = embedded_constant_bytes(dataset)
    if constants >= LARGE_CONSTANT_BYTES:
        return (
            f"make_dataset({epoch}) embeds {constants / 1e6:.0f} MB of constants "
            f"in its dataset's graph (a NumPy array used inside Dataset.map, such "
            f"as tf.gather(x, i) with x a NumPy array); building it and drawing "
            f"its first batch took {seconds:.1f} s. The agent calls make_dataset "
            f"at every epoch and every resume, and each call copies the arrays "
            f"into a new graph again: seconds and gigabytes of memory per epoch. " + FIX
        )
    if seconds >= SLOW_REBUILD_SECONDS:
        return (
            f"make_dataset({epoch}) took {seconds:.1f} s to build and deliver its "
            f"first batch, and the agent calls it at every epoch and every resume. "
            f"Do the expensive work once, outside make_dataset (load files, "
            f"convert arrays to tensors, build lookup tables), and keep only the "
            f"per-epoch shuffle and the skip inside it. " + FIX
        )
    return None
