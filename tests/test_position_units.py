"""The parts of a resume's position proof, in this process (TensorFlow backend).

The trail of batches handed to the model, the proof's refusal text, and
the manifest's check of the ``position`` entry. The whole path, with real
kills, is in tests/test_position_proof.py (TensorFlow) and
tests/on_jax/test_position_proof.py (JAX, Grain).
"""

from __future__ import annotations

import numpy as np
import pytest

from colab_resume.agent.fingerprints import batch_hash
from colab_resume.agent.proof import PositionProof
from colab_resume.agent.trail import KEY, BatchTrail
from colab_resume.checkpoint import Manifest
from colab_resume.data.contract import PositionError
from colab_resume.errors import CorruptRecordError
from colab_resume.protocol.manifest import FileEntry

STEPS = 6


def batches(epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(epoch)
    return [
        (rng.normal(size=(4, 3)).astype("float32"), np.full((4, 1), i, "float32"))
        for i in range(STEPS)
    ]


def test_a_save_hashes_the_next_batch_drawn_one_ahead():
    trail = BatchTrail()
    handed = trail.follow(iter(batches(2)), epoch=2, first=0)
    for _ in range(3):
        next(handed)  # three batches trained
    proof = trail.extras(2, 3)[KEY]
    assert proof == {"epoch": 2, "batch": 3, "fingerprint": batch_hash(batches(2)[3])}
    assert trail.handed_on == 3


def test_no_proof_at_an_epoch_end_or_for_another_epoch():
    trail = BatchTrail()
    for _ in trail.follow(iter(batches(0)), epoch=0, first=0):
        pass
    assert trail.extras(0, STEPS) == {}  # the next epoch's own fingerprint
    assert trail.extras(1, 2) == {}


def test_a_batch_read_ahead_past_the_window_leaves_the_save_without_proof(caplog):
    trail = BatchTrail(window=2)
    handed = trail.follow(iter(batches(0)), epoch=0, first=0)
    for _ in range(5):  # a reader far ahead of the step saved
        next(handed)
    with caplog.at_level("INFO"):
        assert trail.extras(0, 1) == {}
    assert "no position proof" in caplog.text


def test_the_view_joins_what_is_handed_on_before_hashing():
    trail = BatchTrail()
    halves = [(b[0][:2], b[0][2:]) for b in batches(0)]
    handed = trail.follow(iter(halves), 0, 0, view=lambda b: np.concatenate(b))
    next(handed)
    assert trail.extras(0, 1)[KEY]["fingerprint"] == batch_hash(batches(0)[1][0])


def maker(start: int):  # type: ignore[no-untyped-def]
    """A make_dataset whose skip starts the epoch at ``start(skip)``."""

    def make_dataset(epoch: int, skip: int = 0):  # type: ignore[no-untyped-def]
        return iter(batches(epoch)[start(skip) :])

    return make_dataset


def proof_at(epoch: int, batch: int) -> PositionProof:
    proof = PositionProof()
    fingerprint = batch_hash(batches(epoch)[batch])
    proof.restored({KEY: {"epoch": epoch, "batch": batch, "fingerprint": fingerprint}})
    return proof


def test_a_skip_honoured_right_is_proven():
    right = maker(lambda skip: skip)
    assert proof_at(1, 4).check(right, 1, 4, STEPS) is right


@pytest.mark.parametrize("start", [lambda skip: 0, lambda skip: skip - 1])
def test_a_wrong_skip_is_refused_naming_the_batch_and_the_cause(start):
    with pytest.raises(PositionError) as refused:
        proof_at(1, 4).check(maker(start), 1, 4, STEPS)
    text = str(refused.value)
    assert text.startswith("Resuming at batch 4 of epoch 1 would train on other")
    assert batch_hash(batches(1)[4]) in text
    assert "skip parameter is accepted and not used" in text
    assert "the checkpoint is kept" in text


def test_without_skip_the_cause_named_is_the_shuffle():
    def unseeded(epoch: int):  # type: ignore[no-untyped-def]
        return iter(batches(epoch + 7))

    with pytest.raises(PositionError, match="shuffle not seeded from the epoch"):
        proof_at(1, 4).check(unseeded, 1, 4, STEPS)


def test_nothing_to_prove_at_an_epoch_start_or_without_proof_or_skip():
    ignored = maker(lambda skip: 0)
    assert proof_at(1, 4).check(ignored, 1, 0, STEPS) is ignored

    def unshuffled(epoch: int):  # type: ignore[no-untyped-def]
        return iter(batches(epoch + 7))  # another order, but no proof saved

    assert PositionProof().check(unshuffled, 1, 4, STEPS) is unshuffled


def test_after_a_deliberate_change_of_the_data_the_proof_is_reset():
    """reset_data_fingerprints=True: the data changed on purpose."""
    other = maker(lambda skip: skip)
    proof = PositionProof(reset=True)
    stale = {"epoch": 1, "batch": 4, "fingerprint": "0123456789abcdef"}
    proof.restored({KEY: stale})
    assert proof.check(other, 1, 4, STEPS) is other
    with pytest.raises(PositionError):  # a wrong skip is still probed
        proof.check(maker(lambda skip: 0), 1, 4, STEPS)


def test_without_a_proof_the_skip_is_probed_at_batch_1():
    right = maker(lambda skip: skip)
    assert PositionProof().check(right, 1, 4, STEPS) is right
    for wrong in (maker(lambda skip: 0), maker(lambda skip: max(skip - 1, 0))):
        with pytest.raises(PositionError) as refused:
            PositionProof().check(wrong, 1, 4, STEPS)
        text = str(refused.value)
        assert "make_dataset(1, skip=1) gives a first batch of fingerprint" in text
        assert (
            f"batch 1 drawn from make_dataset(1, skip=0) {batch_hash(batches(1)[1])}"
            in text
        )
        assert "skip parameter is accepted and not used" in text


def manifest(extras: dict) -> Manifest:
    return Manifest(
        step=5,
        epoch=1,
        lease=2,
        wall_time=1.0,
        files=(FileEntry(name="ckpt.index", size=3, crc32c="AAAAAA=="),),
        extras=extras,
    )


@pytest.mark.parametrize(
    "entry",
    [
        ["not", "a", "dict"],
        {"epoch": 1, "batch": "4", "fingerprint": "ab"},
        {"epoch": True, "batch": 4, "fingerprint": "ab"},
        {"epoch": 1, "batch": 4, "fingerprint": 7},
        {"epoch": 1, "batch": 4},
    ],
)
def test_a_position_entry_of_another_shape_makes_the_manifest_damaged(entry):
    good = manifest({KEY: {"epoch": 1, "batch": 4, "fingerprint": "ab"}}).to_json()
    assert Manifest.from_json(good).extras[KEY]["batch"] == 4
    bad = dict(good, extras={KEY: entry})
    with pytest.raises(CorruptRecordError, match=r"extras\['position'\]"):
        Manifest.from_json(bad)
