"""keras-hub task models fine-tuned under ``agent.fit`` on TensorFlow.

A keras-hub ``Task`` wraps ``fit`` with its preprocessing and takes a
``tf.data.Dataset`` of raw strings, refusing the distributed dataset the
agent used to hand it. Tiny models built from config (``GemmaCausalLM``,
``BertTextClassifier``, each with and without LoRA), SIGKILLed mid-epoch and
rerun in real processes, end bitwise equal to an uninterrupted run
(:mod:`support.hub`). BERT with LoRA runs with ``frozen="rebuild"``, the
others with the default ``"once"``: every checkpoint of a LoRA run holds the
trained part only. The JAX side is ``tests/on_jax/test_keras_hub.py``.
"""

from __future__ import annotations

import pytest
from support.hub import killed_and_rerun

pytest.importorskip("keras_hub", reason="keras-hub is a test dependency (make test)")
pytestmark = pytest.mark.tf


@pytest.mark.parametrize(
    "args",
    [
        ("--model", "gemma", "--lora"),
        ("--model", "gemma"),
        ("--model", "bert", "--lora", "--frozen", "rebuild"),
        ("--model", "bert"),
    ],
    ids=" ".join,
)
def test_a_task_model_killed_and_rerun_equals_uninterrupted(tmp_path, args) -> None:
    killed_and_rerun(str(tmp_path), *args)


def test_a_subclass_fit_gets_the_dataset_itself() -> None:
    """The TensorFlow backend hands a model with its own ``fit`` the
    ``tf.data.Dataset`` it was given, and Keras' own ``fit`` the agent's
    distributed one (whose iterators it lets go of off the training thread)."""
    import keras
    import tensorflow as tf

    from colab_resume.backend.tensorflow import TensorFlowBackend

    class OwnFit(keras.Sequential):  # type: ignore[misc]
        def fit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return super().fit(*args, **kwargs)

    dataset = tf.data.Dataset.range(4).batch(2)
    chosen = TensorFlowBackend()
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        own = OwnFit([keras.Input((1,))])
        plain = keras.Sequential([keras.Input((1,))])
    fed, release = chosen.fit_input(dataset, own)
    assert fed is dataset
    release()
    fed, release = chosen.fit_input(dataset, plain)
    assert not isinstance(fed, tf.data.Dataset)  # distributed
    release()
