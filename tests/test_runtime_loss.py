"""is_accelerator_loss: which errors mean "the TPU/GPU went away, reconnect"."""

from __future__ import annotations

import sys

import pytest
import tensorflow as tf

from colab_resume.runtime import is_accelerator_loss


@pytest.mark.parametrize(
    "error",
    [
        tf.errors.UnavailableError(None, None, "Socket closed"),
        tf.errors.AbortedError(None, None, "anything"),
        tf.errors.DeadlineExceededError(None, None, "anything"),
        RuntimeError("Unable to find a context_id 1234"),
        RuntimeError("TPU system has not been initialized"),
        RuntimeError("Device /job:worker/task:0/device:TPU:0 incarnation changed"),
        tf.errors.InternalError(None, None, "grpc: Socket closed"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_losses(error):
    assert is_accelerator_loss(error)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("Input 0 of layer dense is incompatible"),
        tf.errors.InvalidArgumentError(None, None, "Incompatible shapes"),
        tf.errors.ResourceExhaustedError(None, None, "OOM when allocating"),
        KeyboardInterrupt(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_not_losses(error):
    assert not is_accelerator_loss(error)


def test_found_through_cause_and_context():
    lost = tf.errors.UnavailableError(None, None, "worker gone")
    try:
        try:
            raise lost
        except Exception as exc:
            raise RuntimeError("callback failed") from exc
    except RuntimeError as wrapped:
        assert is_accelerator_loss(wrapped)
    try:
        try:
            raise lost
        except Exception:
            raise KeyError("while handling")  # noqa: B904 -- implicit context
    except KeyError as wrapped:
        assert wrapped.__cause__ is None and is_accelerator_loss(wrapped)


def test_cyclic_chain_terminates():
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a
    assert not is_accelerator_loss(a)


def test_without_tensorflow_messages_still_count(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if never importable
    assert is_accelerator_loss(ConnectionError("Socket closed"))
    assert not is_accelerator_loss(ConnectionError("refused"))
