"""How a dataset is judged and costed, below the backends that build epochs.

The agent rebuilds each epoch's dataset with ``make_dataset(epoch)`` and
positions it at the step it resumes from; no iterator is ever checkpointed
(docs/DESIGN.md §2). The positioning asks the backend, so it lives above
it (:mod:`colab_resume.agent.epochs`, :mod:`colab_resume.agent.fingerprints`);
what the backends themselves use lives here, below them.

* :mod:`~colab_resume.data.contract`: what ``make_dataset`` owes the agent
  (its errors, its ``skip`` keyword).
* :mod:`~colab_resume.data.grain`: Grain pipelines, positioned by their own
  saved state.
* :mod:`~colab_resume.data.cost`: what rebuilding an epoch costs, and the
  one warning when it is too much.
* :mod:`~colab_resume.data.graph`: inside a ``tf.data`` pipeline (its
  datasets, their functions' graphs), judged against
  :mod:`~colab_resume.data.repeatable`, the allow-list of what repeats.

Imports nothing of the backends, the agent or the checkpoints: they import it.
"""

from colab_resume.data.contract import (
    DatasetError,
    NonDeterministicDatasetError,
    PositionError,
    accepts_skip,
)
from colab_resume.data.grain import GrainPosition

__all__ = [
    "DatasetError",
    "GrainPosition",
    "NonDeterministicDatasetError",
    "PositionError",
    "accepts_skip",
]
