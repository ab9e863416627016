"""Fine-tune a tiny keras-hub task model through ``agent.fit``, maybe dying.

    PYTHONPATH=tests python tests/workers/hub_worker.py RUN_DIR OUT_DIR
        --model gemma|bert [--lora] [--kill-at-step N]

The models are built from config, never downloaded: a ``GemmaCausalLM`` over
a two-layer ``GemmaBackbone`` with its ``GemmaCausalLMPreprocessor`` (a
SentencePiece vocabulary trained here on a few sentences), or a
``BertTextClassifier`` with its ``BertTextClassifierPreprocessor`` over a
small word-piece vocabulary; ``--lora`` enables LoRA on the backbone (its
base frozen), as a keras-hub fine-tune does. The model's own ``fit`` gets
what a keras-hub user passes it: raw strings, in a Grain ``MapDataset`` on
JAX and a ``tf.data.Dataset`` on TensorFlow, shuffled per epoch; the
preprocessing is the task's.

The backend is ``KERAS_BACKEND`` (JAX when TensorFlow is not installed).
OUT_DIR receives ``weights.npz`` (every model and optimizer variable) and
``result.json`` (the steps restored from).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from functools import cache
from typing import Any

EPOCHS = 2
STEPS_PER_EPOCH = 5
BATCH = 4
WORDS = "the quick brown fox jumps over a lazy dog while cats sleep".split()


def sentences() -> list[str]:
    import numpy as np

    rng = np.random.default_rng(7)
    return [
        " ".join(rng.choice(WORDS, size=int(rng.integers(2, 7))))
        for _ in range(STEPS_PER_EPOCH * BATCH)
    ]


@cache
def sentencepiece_proto() -> bytes:
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences() * 4),
        model_writer=model,
        vocab_size=20,
        model_type="word",
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        bos_piece="<bos>",
        eos_piece="<eos>",
        unk_piece="<unk>",
        user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
        minloglevel=2,
    )
    return model.getvalue()


def build_gemma(lora: bool) -> Any:
    import keras
    import keras_hub

    tokenizer = keras_hub.models.GemmaTokenizer(proto=sentencepiece_proto())
    preprocessor = keras_hub.models.GemmaCausalLMPreprocessor(
        tokenizer=tokenizer, sequence_length=8
    )
    backbone = keras_hub.models.GemmaBackbone(
        vocabulary_size=tokenizer.vocabulary_size(),
        num_layers=2,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
        head_dim=4,
        dropout=0.1,
    )
    model = keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=preprocessor)
    if lora:
        backbone.enable_lora(rank=2)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["accuracy"],
    )
    return model


def build_bert(lora: bool) -> Any:
    import keras
    import keras_hub

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer=tokenizer, sequence_length=8
    )
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocabulary),
        num_layers=2,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=8,
    )
    model = keras_hub.models.BertTextClassifier(
        backbone=backbone, preprocessor=preprocessor, num_classes=2
    )
    if lora:
        backbone.enable_lora(rank=2)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    return model


def dataset_maker(model: str) -> Any:
    """``make_dataset(epoch)``: raw strings, as a keras-hub user feeds them."""
    import numpy as np

    texts = sentences()
    labels = [len(text.split()) % 2 for text in texts]

    def epoch_order(epoch: int) -> list[int]:
        return [int(i) for i in np.random.default_rng(epoch).permutation(len(texts))]

    def make_dataset(epoch: int) -> Any:
        order = epoch_order(epoch)
        x = [texts[i] for i in order]
        y = [labels[i] for i in order]
        import keras

        if keras.backend.backend() == "jax":
            import grain

            rows: list[Any] = x if model == "gemma" else list(zip(x, y, strict=True))
            return grain.MapDataset.source(rows).batch(BATCH)
        import tensorflow as tf

        rows = (x,) if model == "gemma" else (x, y)
        return tf.data.Dataset.from_tensor_slices(rows).batch(BATCH)

    return make_dataset


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--model", choices=("gemma", "bert"), required=True)
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument(
        "--frozen", choices=("once", "rebuild", "every"), default="once"
    )
    args = parser.parse_args()

    import keras
    import numpy as np
    from support.dying import kill_if_at
    from support.processes import write_out

    from colab_resume.agent import Agent

    build = {"gemma": build_gemma, "bert": build_bert}[args.model]
    os.makedirs(args.out_dir, exist_ok=True)
    keras.utils.set_random_seed(3)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    agent = Agent(
        args.run_dir,
        save_every_steps=3,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        dead_after_seconds=1.5,
        prefer="cpu",
        frozen=args.frozen,
    )
    agent.on_step(lambda step: kill_if_at(step, args.kill_at_step))
    restored: list[int] = []
    agent.events.subscribe(
        lambda e: restored.append(e.step) if e.kind == "checkpoint.restored" else None
    )
    agent.fit(
        lambda: build(args.lora),
        dataset_maker(args.model),
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        verbose=0,
    )
    model = agent.model
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    write_out(args.out_dir, model, {"restored": restored, "trainable": trainable})
    return 0


if __name__ == "__main__":
    sys.exit(main())
