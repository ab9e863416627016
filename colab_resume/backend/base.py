"""What the agent, the data path and the checkpoints ask of a Keras backend.

Each question here used to be an ``if backend.is_jax():`` at its call
site. A :class:`Backend` answers them for one framework, chosen once by
:func:`colab_resume.backend.current`: TensorFlow in
:mod:`colab_resume.backend.tensorflow`, JAX in :mod:`colab_resume.backend.jax`.
Only those modules import their framework.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: the accelerator asks for a connector
    from colab_resume.backend.connector import Connecting, Connector
    from colab_resume.backend.host_pieces import HostPieces
    from colab_resume.data.grain import GrainPosition


class CustomLoop(Protocol):
    """What :meth:`Backend.train_custom` reads from the agent's custom loop."""

    state: Any
    train_step: Callable[..., Any]
    last_outputs: Any

    def epochs(self, start_step: int) -> Iterator[tuple[int, Any, int]]:
        """``(epoch, its dataset positioned at the resumed step, steps)``."""
        ...

    @property
    def start_epoch(self) -> int:
        """The epoch training resumed in (set by the first ``epochs`` item)."""
        ...

    def warn(self, message: str) -> None:
        """Report a warning event."""
        ...

    def follow(
        self,
        batches: Iterator[Any],
        epoch: int,
        view: Callable[[Any], Any] | None = None,
    ) -> Iterator[Any]:
        """The epoch's batches as handed to ``train_step``, kept for the
        position proof a save carries (``view``: the global batch as host
        arrays, from one handed on)."""
        ...


class StepHooks(Protocol):
    """The duties around each step (``agent.steps.StepDuties``)."""

    step: int

    def before_step(self) -> None:
        """Before the step runs."""
        ...

    def after_step(self, step: int) -> bool:
        """After step ``step``; True when training must stop."""
        ...


class Backend(Protocol):
    """The framework-specific answers; one instance per process.

    Attributes:
        name: Keras' name for the backend (``"tensorflow"``, ``"jax"``).
        portable_only: checkpoints can only be host arrays (no framework
            checkpoint format to fall back to).
        chains_epochs: several epochs' datasets can share one ``fit`` call.
        reads_pipeline_graphs: its datasets have graphs that
            ``data.cost.RebuildWatch`` can read.
    """

    name: str
    portable_only: bool
    chains_epochs: bool
    reads_pipeline_graphs: bool

    def require(self) -> None:
        """Import Keras 3 and the framework it trains with, or raise
        ``TensorFlowNotInstalledError`` saying what to install."""
        ...

    def connector(self, accelerator: Connecting) -> Connector:
        """What connects ``accelerator`` (and again after a loss) with this
        framework."""
        ...

    def variable_types(self) -> tuple[type, ...]:
        """The framework's own variable types a checkpoint group may hold
        besides ``keras.Variable`` (``tf.Variable``); () for none."""
        ...

    def generator_types(self) -> tuple[type, ...]:
        """The framework's random-generator types whose state a model may keep
        untracked (``tf.random.Generator``); () for none."""
        ...

    def variable_scope(self, model: Any) -> contextlib.AbstractContextManager[Any]:
        """Where new variables for ``model`` must be made (its strategy's
        scope); a null context where the distribution lays them out itself."""
        ...

    def epoch_dataset(
        self,
        make_dataset: Callable[..., Any],
        epoch: int,
        *,
        skip: int,
        steps_per_epoch: int,
        position: GrainPosition | None = None,
    ) -> Any:
        """``make_dataset(epoch)`` positioned after ``skip`` batches, ending at
        the epoch (see :func:`colab_resume.agent.epochs.epoch_dataset`)."""
        ...

    def first_batch_of(self, dataset: Any) -> Any:
        """The first batch of an epoch's dataset, or None when it is empty."""
        ...

    def check_first_batch(
        self, make_dataset: Callable[..., Any], dataset: Any, epoch: int, model: Any
    ) -> None:
        """Refuse an epoch whose batches cannot be split over the replicas."""
        ...

    def chain(self, datasets: Sequence[Any]) -> Any:
        """The datasets one after the other, as one dataset (several epochs)."""
        ...

    def describe_distribution(self, strategy: Any, model: Any) -> dict[str, Any]:
        """What the run trains under, as JSON: its kind, mesh shape and axes,
        where it came from, and the layout of each of ``model``'s sharded
        variables (``model`` may be None)."""
        ...

    def fit_input(self, dataset: Any, model: Any) -> tuple[Any, Callable[[], None]]:
        """What to pass ``model.fit`` for ``dataset``, and a call for after it
        returns (it lets go of what ``fit`` made from the input)."""
        ...

    def random_op_watch(self) -> Any:
        """A ``RandomOpWatch`` for the step's first trace, or None when the
        backend has no random state hidden from the checkpoint."""
        ...

    def sync_fit_state(self, model: Any) -> None:
        """Before a snapshot from inside ``fit``: make the variables current."""
        ...

    def outside_scope(self, model: Any) -> bool:
        """Whether ``model`` was built outside the distribution scope entered."""
        ...

    def host_variable(self, shape: tuple[int, ...], dtype: str) -> Any:
        """A zero variable for host arrays (outside any strategy)."""
        ...

    def train_custom(
        self, loop: CustomLoop, start_step: int, duties: StepHooks, strategy: Any
    ) -> None:
        """Run the custom loop's steps from ``start_step`` until done or told."""
        ...

    def read_value(self, variable: Any, *, whole: bool = False) -> Any:
        """``variable``'s value now, safe to read later from another thread
        (a NumPy copy, or a tensor the framework will not update in place);
        a variable sharded over devices as its
        :class:`~colab_resume.backend.host_pieces.HostPieces` unless ``whole``."""
        ...

    def own_pieces(self, variable: Any) -> HostPieces | None:
        """The pieces of a sharded ``variable`` this process writes (replica
        0 of each shard its devices hold; maybe none), as host copies; None,
        copying nothing, when it is not sharded."""
        ...

    def assign_pieces(self, variable: Any, pieces: HostPieces, dtype: Any) -> None:
        """Set ``variable`` from ``pieces`` (as ``dtype``): each device's
        region only where it is sharded, else the whole array."""
        ...

    def fused_reader(self, variables: list[Any]) -> Callable[[], list[Any]] | None:
        """One call that reads every variable, or None when there is none."""
        ...
