"""keras-hub task models fine-tuned under ``agent.fit`` on JAX, no TensorFlow.

A keras-hub ``Task`` takes a Grain ``MapDataset`` of raw strings and maps its
preprocessing over it, refusing the generator of batches the agent used to
hand it. Tiny models built from config (``GemmaCausalLM``,
``BertTextClassifier``, each with and without LoRA), SIGKILLed mid-epoch and
rerun in real processes, end bitwise equal to an uninterrupted run
(:mod:`support.hub`). Gemma with LoRA runs with ``frozen="once"`` (the
default) and with ``"rebuild"``, BERT with LoRA with ``"once"``: every
checkpoint of a LoRA run holds the trained part only. (Gemma without LoRA
runs on TensorFlow, ``tests/test_keras_hub.py``.)
"""

from __future__ import annotations

import pytest
from support.hub import called_at_once, killed_and_rerun, worker_module

pytest.importorskip("keras_hub", reason="keras-hub is a test dependency (make test)")


@pytest.mark.parametrize(
    "args",
    [
        ("--model", "gemma", "--lora"),
        ("--model", "gemma", "--lora", "--frozen", "rebuild"),
        ("--model", "bert", "--lora"),
        ("--model", "bert"),
    ],
    ids=" ".join,
)
def test_a_task_model_killed_and_rerun_equals_uninterrupted(tmp_path, args) -> None:
    killed_and_rerun(str(tmp_path), *args)


def test_a_task_preprocessor_is_built_before_grains_threads_call_it() -> None:
    """A task's own ``fit`` maps its preprocessor over a Grain dataset on
    Grain's reading threads. Unbuilt, their first calls each ``build()`` it
    and race: one adds the packer after another finished ("cannot add new
    elements of state ... already built"; 4 tries in 10 here, and a kill
    test failed by it now and then). The agent builds it on the training
    thread first (``KerasFit.build``): eight threads released at once on a
    fresh Gemma preprocessor then all succeed, every try."""
    import types

    import keras_hub

    from colab_resume.agent.keras_fit import _build_preprocessor

    proto = worker_module().sentencepiece_proto()
    for _ in range(10):
        preprocessor = keras_hub.models.GemmaCausalLMPreprocessor(
            tokenizer=keras_hub.models.GemmaTokenizer(proto=proto), sequence_length=8
        )
        assert not preprocessor.built
        _build_preprocessor(types.SimpleNamespace(preprocessor=preprocessor))
        assert preprocessor.built
        assert called_at_once(preprocessor) == []


def test_fit_gets_a_grain_dataset_of_the_kind_returned() -> None:
    """A ``MapDataset`` is fed as its slice, an ``IterDataset`` as a
    positioned ``IterDataset``: a model's own ``fit`` may map over either."""
    import grain

    from colab_resume.data.grain import GrainPosition

    rows = list(range(12))
    mapped = grain.MapDataset.source(rows).batch(2)
    fed = GrainPosition().fed(mapped, 0, drop=2, wanted=3)
    assert isinstance(fed, grain.MapDataset)
    assert [list(b) for b in fed] == [[4, 5], [6, 7], [8, 9]]

    iterable = grain.MapDataset.source(rows).batch(2).to_iter_dataset()
    fed = GrainPosition().fed(iterable, 0, drop=1, wanted=2)
    assert isinstance(fed, grain.IterDataset)
    doubled = fed.map(lambda b: b * 2)  # what keras-hub does with it
    assert [list(b) for b in doubled] == [[4, 6], [8, 10]]
    assert [list(b) for b in fed] == [[2, 3], [4, 5]]  # iterated again: anew
