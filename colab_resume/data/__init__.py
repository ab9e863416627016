"""How a dataset is positioned, judged and costed: the data path, one package.

The agent rebuilds each epoch's dataset with ``make_dataset(epoch)`` and
positions it at the step it resumes from; no iterator is ever checkpointed
(docs/DESIGN.md §2).

* :mod:`~colab_resume.data.contract`: what ``make_dataset`` owes the agent
  (its errors, its ``skip`` keyword); below the backends, which import it.
* :mod:`~colab_resume.data.grain`: Grain pipelines, positioned by their own
  saved state; below the backends too.
* :mod:`~colab_resume.data.position`: an epoch's dataset positioned after
  the batches already trained, through the backend.
* :mod:`~colab_resume.data.fingerprints`: each epoch's first-batch
  fingerprint, checked on resume (the same data as before the restart).
* :mod:`~colab_resume.data.trail`: the batches handed to the model, by
  place; a save's position proof is the next one's fingerprint.
* :mod:`~colab_resume.data.proof`: a resume's first batch compared with
  that proof before training (repositioned, or refused by name).
* :mod:`~colab_resume.data.cost`: what rebuilding an epoch costs, and the
  one warning when it is too much.
* :mod:`~colab_resume.data.graph`: inside a ``tf.data`` pipeline (its
  datasets, their functions' graphs), judged against
  :mod:`~colab_resume.data.repeatable`, the allow-list of what repeats.

Imports nothing of the agent or the checkpoints: they import it.
"""

# Every name the module colab_resume.data had is importable from here.
from colab_resume.data.contract import (
    DatasetError,
    NonDeterministicDatasetError,
    PositionError,
    accepts_skip,
)
from colab_resume.data.fingerprints import (
    DataFingerprints,
    check_fingerprint,
    check_global_batch_unchanged,
    fingerprint,
    first_batch_facts,
    restored_fingerprints,
)
from colab_resume.data.grain import GrainPosition
from colab_resume.data.position import check_global_batch, epoch_dataset, split_step

__all__ = [
    "DataFingerprints",
    "DatasetError",
    "GrainPosition",
    "NonDeterministicDatasetError",
    "PositionError",
    "accepts_skip",
    "check_fingerprint",
    "check_global_batch",
    "check_global_batch_unchanged",
    "epoch_dataset",
    "fingerprint",
    "first_batch_facts",
    "restored_fingerprints",
    "split_step",
]
