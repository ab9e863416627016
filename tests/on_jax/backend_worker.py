"""Train a small Keras model through ``agent.fit`` on either backend, maybe dying.

    PYTHONPATH=tests python tests/on_jax/backend_worker.py RUN_DIR OUT_DIR
        [--backend jax] [--replicas 2] [--precision float32] [--no-dropout]
        [--kill-at-step N] [--unavailable-at-step N] [--per-replica-batch N]
        [--loop run|light] [--skip-mode right|ignored|off-by-one]

The same model and data on JAX (NumPy batches, run in the virtualenv
without TensorFlow) and on TensorFlow (a ``tf.data`` pipeline over the
same arrays, run in the main virtualenv), so one run directory can move
between them. OUT_DIR receives ``weights.npz`` (every model and optimizer
variable, by position) and ``result.json`` (the step restored from, the
steps trained here, recoveries, the runtime-change events, whether
TensorFlow was imported). ``--kill-at-step`` SIGKILLs the process right
after the agent's duties of that step; ``--unavailable-at-step`` raises,
once, the error a lost TPU raises through XLA (no TPU can be lost here).
``--loop run`` trains the same model through ``agent.run`` with a custom
step written against Keras' stateless API under ``jax.jit`` (JAX only).
``--loop light`` trains it through the lighter path: ``agent.restore`` and
the script's own ``model.fit`` calls with ``agent.callback()``, a resumed
epoch finished by a ``fit`` over its remaining batches. ``--skip-mode``
makes ``make_dataset``'s ``skip`` accepted and not used (``ignored``) or
honoured one batch early (``off-by-one``) instead of ``right``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from stateless_step import jax_train_step  # this folder: the script's own

EPOCHS = 2
STEPS_PER_EPOCH = 7
GLOBAL_BATCH = 8


def arrays_of_epoch(epoch: int) -> tuple[object, object]:
    import numpy as np

    rng = np.random.default_rng(100 + epoch)  # deterministic per epoch
    x = rng.normal(size=(STEPS_PER_EPOCH * GLOBAL_BATCH, 6)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    return x, y


def dataset_maker(backend: str, batch: int, skip_mode: str = "right"):  # type: ignore[no-untyped-def]
    def numpy_batches(epoch: int, skip: int = 0) -> list[tuple[object, object]]:
        x, y = arrays_of_epoch(epoch)
        steps = len(x) // batch  # type: ignore[arg-type]
        pairs = [
            (x[i * batch : (i + 1) * batch], y[i * batch : (i + 1) * batch])  # type: ignore[index]
            for i in range(steps)
        ]
        first = {"right": skip, "ignored": 0}.get(skip_mode, max(skip - 1, 0))
        return pairs[first:]

    def tf_dataset(epoch: int, skip: int = 0) -> object:
        import tensorflow as tf

        x, y = arrays_of_epoch(epoch)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(
            batch, drop_remainder=True
        )
        return ds.skip(skip)

    return numpy_batches if backend == "jax" else tf_dataset


def build_model(dropout: bool):  # type: ignore[no-untyped-def]
    def build() -> object:
        import keras

        layers = [keras.Input((6,)), keras.layers.Dense(16, activation="relu")]
        if dropout:
            layers.append(keras.layers.Dropout(0.3))
        layers.append(keras.layers.Dense(1, activation="sigmoid"))
        model = keras.Sequential(layers)
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
        return model

    return build


def light_fit(agent, dropout: bool, batch: int):  # type: ignore[no-untyped-def]
    """The lighter path: the model built in the agent's scope, restored, and
    trained by plain ``model.fit`` calls over NumPy batches."""
    import itertools

    make_dataset = dataset_maker("jax", batch)

    def batches_from(step: int):  # type: ignore[no-untyped-def]
        """Every batch of the run, in order, from global step ``step``."""
        every = (pair for epoch in range(EPOCHS) for pair in make_dataset(epoch))
        yield from itertools.islice(every, step, None)  # fit takes generators

    with agent.connect().scope():
        model = build_model(dropout)()
    start = agent.restore(model, epochs=EPOCHS)
    epoch = start.initial_epoch
    if start.skip:  # finish the resumed epoch: its remaining batches only
        model.fit(
            batches_from(start.step),
            initial_epoch=epoch,
            epochs=epoch + 1,
            steps_per_epoch=STEPS_PER_EPOCH - start.skip,
            callbacks=[agent.callback()],
            shuffle=False,  # a generator's order is the order
            verbose=0,
        )
        epoch += 1
    if epoch < EPOCHS:
        model.fit(
            batches_from(epoch * STEPS_PER_EPOCH),
            initial_epoch=epoch,
            epochs=EPOCHS,
            steps_per_epoch=STEPS_PER_EPOCH,
            callbacks=[agent.callback()],
            shuffle=False,  # a generator's order is the order
            verbose=0,
        )
    return model


def build_state(dropout: bool):  # type: ignore[no-untyped-def]
    def build() -> dict[str, object]:
        model = build_model(dropout)()
        optimizer = model.optimizer  # type: ignore[attr-defined]
        optimizer.build(model.trainable_variables)  # type: ignore[attr-defined]
        return {"model": model, "optimizer": optimizer}

    return build


def lost_tpu_error() -> BaseException:
    """What XLA raises when a TPU goes away mid-step (JAX), or TF's error."""
    if os.environ["KERAS_BACKEND"] == "jax":
        import jax

        error_type = getattr(jax.errors, "JaxRuntimeError", None)
        if error_type is None:  # older jaxlib
            from jax._src.lib import xla_client

            error_type = xla_client.XlaRuntimeError
        return error_type("UNAVAILABLE: TPU halted (standing in for a lost TPU)")
    import tensorflow as tf

    return tf.errors.UnavailableError(None, None, "Socket closed")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--backend", choices=("jax", "tensorflow"), default="jax")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--no-dropout", action="store_true")
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--unavailable-at-step", type=int)
    parser.add_argument("--per-replica-batch", type=int)
    parser.add_argument("--loop", choices=("fit", "run", "light"), default="fit")
    # The NumPy batches on TensorFlow too: one script for both backends.
    parser.add_argument("--numpy-data", action="store_true")
    parser.add_argument(
        "--skip-mode", choices=("right", "ignored", "off-by-one"), default="right"
    )
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = args.backend

    import keras
    import numpy as np
    from support.dying import kill_if_at

    from colab_resume.agent import Agent

    os.makedirs(args.out_dir, exist_ok=True)
    trained = {"steps": 0}
    lose_at = [args.unavailable_at_step]

    def after_step(step: int) -> None:
        trained["steps"] += 1
        kill_if_at(step, args.kill_at_step)
        if lose_at[0] is not None and step == lose_at[0]:
            lose_at[0] = None
            raise lost_tpu_error()

    agent = Agent(
        args.run_dir,
        save_every_steps=4,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        dead_after_seconds=1.5,
        prefer="cpu",
        cpu_replicas=args.replicas,
        precision=args.precision,
        recovery_backoff_seconds=0.1,
    )
    agent.on_step(after_step)
    seen: dict[str, list[object]] = {"restored": [], "changed": []}

    def on_event(event: object) -> None:
        kind = getattr(event, "kind", None)
        if kind == "checkpoint.restored":
            seen["restored"].append(getattr(event, "step", 0))
        elif kind == "run.runtime_changed":
            seen["changed"].append(
                {"message": event.message, **event.data}  # type: ignore[attr-defined]
            )

    agent.events.subscribe(on_event)
    keras.utils.set_random_seed(11)
    batch = (args.per_replica_batch or 0) * args.replicas or GLOBAL_BATCH
    if args.loop == "run":
        state = agent.run(
            build_state(not args.no_dropout),
            dataset_maker(
                "jax" if args.numpy_data else args.backend, batch, args.skip_mode
            ),
            jax_train_step(),
            total_steps=EPOCHS * STEPS_PER_EPOCH,
            steps_per_epoch=STEPS_PER_EPOCH,
        )
        model = state["model"]
    elif args.loop == "light":
        model = light_fit(agent, not args.no_dropout, batch)
    else:
        agent.fit(
            build_model(not args.no_dropout),
            dataset_maker(
                "jax" if args.numpy_data else args.backend, batch, args.skip_mode
            ),
            epochs=EPOCHS,
            steps_per_epoch=STEPS_PER_EPOCH,
            verbose=0,
        )
        model = agent.model

    def host(variable: object) -> object:
        if args.backend == "jax":
            return np.asarray(keras.ops.convert_to_numpy(variable.value))  # type: ignore[attr-defined]
        return np.asarray(variable.numpy())  # type: ignore[attr-defined]

    arrays = {f"model_{i:03d}": host(v) for i, v in enumerate(model.variables)}
    for i, v in enumerate(model.optimizer.variables):
        arrays[f"optimizer_{i:03d}"] = host(v)
    np.savez(os.path.join(args.out_dir, "weights.npz"), **arrays)
    result = {
        "restored_step": seen["restored"][0] if seen["restored"] else 0,
        "restores": seen["restored"],
        "runtime_changed": seen["changed"],
        "steps_here": trained["steps"],
        "recoveries": agent.recoveries,
        "iterations": int(host(model.optimizer.iterations)),  # type: ignore[call-overload]
        "tensorflow_imported": "tensorflow" in sys.modules,
        "devices": agent.connection.replicas if agent.connection else None,
        "variables": [v.path for v in model.variables],
    }
    with open(os.path.join(args.out_dir, "result.json"), "w") as handle:
        json.dump(result, handle, default=str)
    print(f"DONE steps_here={trained['steps']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
