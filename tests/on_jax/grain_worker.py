"""Train through ``agent.fit`` on JAX with a Grain pipeline, maybe dying.

    PYTHONPATH=tests python tests/on_jax/grain_worker.py RUN_DIR OUT_DIR
        --kind map|iter|loader|numpy [--kill-at-step N] [--changed]
        [--skip right|ignored|off-by-one] [--epochs N]

``make_dataset(epoch)`` returns a Grain pipeline with a seeded shuffle
and a random map: a ``MapDataset`` (``map``), an ``IterDataset`` with
read-ahead threads and a random map after them (``iter``), or a
``DataLoader`` with an ``IndexSampler`` and a ``RandomMap`` transform
(``loader``). No ``skip`` argument: the agent positions the pipeline.
``--changed`` adds a stage to the pipeline (to be refused on resume).
``--skip`` gives ``make_dataset`` a ``skip`` parameter, as the tf.data
recipe has it: honoured (``right``: batches from ``skip`` on), accepted and
not used (``ignored``), or honoured one batch early (``off-by-one``). The
``numpy`` kind is a generator of NumPy batches shuffled from the epoch.
``--kill-at-step`` SIGKILLs the process after that step's duties.

OUT_DIR receives ``weights.npz`` (every model and optimizer variable) and
``result.json`` (the step restored from, how the pipeline was positioned).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

EPOCHS = 2
STEPS_PER_EPOCH = 7
BATCH = 8


def records() -> list[tuple[object, object]]:
    import numpy as np

    rng = np.random.default_rng(5)
    x = rng.normal(size=(STEPS_PER_EPOCH * BATCH, 6)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    return list(zip(x, y, strict=True))


def dataset_maker(kind: str, changed: bool, skip_mode: str | None):  # type: ignore[no-untyped-def]
    import grain
    import numpy as np

    source = records()

    def noise(element, rng):  # type: ignore[no-untyped-def]
        x, y = element
        return x + rng.normal(size=x.shape).astype("float32") * 0.1, y

    def scaled(batch):  # type: ignore[no-untyped-def]
        return batch[0] * np.float32(2.0), batch[1]

    class Noise(grain.transforms.RandomMap):  # type: ignore[misc]
        def random_map(self, element, rng):  # type: ignore[no-untyped-def]
            return noise(element, rng)

    def make_dataset(epoch: int, skip: int = 0):  # type: ignore[no-untyped-def]
        # Where the pipeline starts, as the --skip mode honours `skip`.
        first = {"right": skip, "off-by-one": max(skip - 1, 0)}.get(skip_mode, 0)
        if kind == "numpy":
            order = np.random.default_rng(epoch).permutation(len(source))
            return (
                tuple(
                    np.stack(part)
                    for part in zip(*(source[i] for i in rows), strict=True)
                )
                for rows in order.reshape(-1, BATCH)[first:]
            )
        if kind == "loader":
            sampler = grain.samplers.IndexSampler(
                num_records=len(source),
                shuffle=True,
                seed=epoch,
                num_epochs=1,
                shard_options=grain.sharding.NoSharding(),
            )
            operations = [Noise(), grain.transforms.Batch(BATCH, drop_remainder=True)]
            return grain.DataLoader(
                data_source=source,
                sampler=sampler,
                operations=operations,
                worker_count=0,
            )
        ds = grain.MapDataset.source(source).shuffle(seed=epoch)
        if kind == "map":
            ds = ds.random_map(noise, seed=11).batch(BATCH, drop_remainder=True)
            ds = ds[first:]
            return ds.map(scaled) if changed else ds
        ds = ds.batch(BATCH, drop_remainder=True).to_iter_dataset(
            grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
        )
        ds = ds.random_map(lambda b, rng: (b[0] + rng.random(), b[1]), seed=epoch)
        if first:  # as an iterator is positioned: its first batches drawn
            ds = _dropping(ds, first)
        return ds.map(scaled) if changed else ds

    if skip_mode is None:
        return lambda epoch: make_dataset(epoch)
    return make_dataset


def _dropping(ds, count: int):  # type: ignore[no-untyped-def]
    """``ds``'s iterator with its first ``count`` batches drawn."""
    iterator = iter(ds)
    for _ in range(count):
        next(iterator)
    return iterator


def build_model():  # type: ignore[no-untyped-def]
    import keras

    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    return model


class PositionLog(logging.Handler):
    """Keeps the agent's line saying how the Grain pipeline was positioned."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Grain pipeline positioned" in message:
            self.lines.append(message)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out_dir")
    parser.add_argument(
        "--kind", choices=("map", "iter", "loader", "numpy"), required=True
    )
    parser.add_argument("--skip", choices=("right", "ignored", "off-by-one"))
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--changed", action="store_true")
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = "jax"

    import keras
    import numpy as np
    from support.dying import kill_if_at

    from colab_resume.agent import Agent

    positioned = PositionLog()
    logger = logging.getLogger("colab_resume.agent.keras_fit")
    logger.setLevel(logging.INFO)
    logger.addHandler(positioned)
    os.makedirs(args.out_dir, exist_ok=True)
    keras.utils.set_random_seed(3)
    agent = Agent(
        args.run_dir,
        save_every_steps=4,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        dead_after_seconds=1.5,
        prefer="cpu",
        cpu_replicas=2,
    )
    agent.on_step(lambda step: kill_if_at(step, args.kill_at_step))
    restored: list[int] = []
    agent.events.subscribe(
        lambda e: restored.append(e.step) if e.kind == "checkpoint.restored" else None
    )
    agent.events.subscribe(
        lambda e: (
            positioned.lines.append(e.message)
            if e.kind == "data.repositioned"
            else None
        )
    )
    agent.fit(
        build_model,
        dataset_maker(args.kind, args.changed, args.skip),
        epochs=args.epochs,
        steps_per_epoch=STEPS_PER_EPOCH,
        verbose=0,
    )
    model = agent.model
    variables = list(model.variables) + list(model.optimizer.variables)
    np.savez(
        os.path.join(args.out_dir, "weights.npz"),
        **{
            f"{i:03d}": np.asarray(keras.ops.convert_to_numpy(v.value))
            for i, v in enumerate(variables)
        },
    )
    with open(os.path.join(args.out_dir, "result.json"), "w") as handle:
        json.dump({"restored": restored, "positioned": positioned.lines}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
