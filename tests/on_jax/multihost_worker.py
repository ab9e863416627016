"""One process of a multi-process ``agent.fit`` or ``agent.run`` on JAX's CPU runtime.

    python tests/on_jax/multihost_worker.py RUN_DIR OUT_DIR --process K
        --processes N --port P [--devices D] [--dead-after S] [--step-delay T]
        [--loop fit|run] [--data global|per-process [--change-shard K:HOW]]
        [--data grain|grain-per-process|grain-elastic] [--model-parallel]

Every process of the job runs this with its own ``--process``; they meet
at the coordinator on 127.0.0.1:P (process 0 serves it). Each process has
D CPU devices; the model is a ``DataParallel`` over all N x D. It prints
``STEP s`` after the agent's duties of each step (a test waits for these
to kill a process during training), ``EXIT`` on a normal end, and writes
OUT_DIR/weights.npz and OUT_DIR/result.json (process 0) once fit returns.

``--loop run`` trains the same model through ``agent.run`` with a step
written against Keras' stateless API under ``jax.jit`` (the same code on
one process or many). ``--data per-process`` makes ``make_dataset`` yield
only this process's rows (``data_sharding="per_process"``): the same rows
the agent would have fed it, so the run is bitwise equal to a global one;
``--change-shard K:short`` drops one row from process K's batches,
``K:reversed`` reverses their rows.

The ``grain`` kinds feed the same rows through Grain iterators, positioned
by their saved states: ``grain``, every process the global batches (one
state, the same everywhere); ``grain-per-process``, each process its own
rows, process 1's read among as many rows its pipeline filters out (so the
processes' states differ: restoring one's state on the other goes wrong);
``grain-elastic``, each process its shard of an ``ElasticIterator`` (one
global position, valid on any process count).

``--model-parallel`` sets the user's ``ModelParallel`` once the processes
joined: the first Dense layer split over the processes, so that each
process holds pieces of the state no other one does (the weights written
out are gathered whole).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

EPOCHS = 3
STEPS_PER_EPOCH = 6
GLOBAL_BATCH = 8
# --data: the agent's data_sharding for each.
DATA_SHARDING = {
    "global": "global",
    "per-process": "per_process",
    "grain": "global",
    "grain-per-process": "per_process",
    "grain-elastic": "per_process",
}


def make_dataset(epoch: int, skip: int = 0) -> list[tuple[object, object]]:
    """Global batches; the agent feeds each process its own rows."""
    import numpy as np

    rng = np.random.default_rng(7 + epoch)
    x = rng.normal(size=(STEPS_PER_EPOCH * GLOBAL_BATCH, 5)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    return [
        (
            x[i * GLOBAL_BATCH : (i + 1) * GLOBAL_BATCH],
            y[i * GLOBAL_BATCH : (i + 1) * GLOBAL_BATCH],
        )
        for i in range(skip, STEPS_PER_EPOCH)
    ]


def own_rows(make: object, change: str | None) -> object:
    """``make``'s batches cut to this process's rows; ``change``: "short"
    drops one row, "reversed" reverses their order."""
    import jax

    def make_dataset(epoch: int, skip: int = 0) -> list[tuple[object, object]]:
        share = GLOBAL_BATCH // jax.process_count()
        first = jax.process_index() * share
        last = first + share - (1 if change == "short" else 0)
        order = -1 if change == "reversed" else 1
        return [
            (x[first:last][::order], y[first:last][::order])
            for x, y in make(epoch, skip)  # type: ignore[operator]
        ]

    return make_dataset


def grain_data(make: object, kind: str) -> object:
    """``make``'s rows as a Grain iterator per epoch (see the module docstring)."""
    import grain
    import jax
    import numpy as np

    def rows(epoch: int, share: int, first: int, padded: bool) -> list[object]:
        out: list[object] = []
        for x, y in make(epoch):  # type: ignore[operator]
            for r in range(first, first + share):
                out.append((x[r], y[r], np.True_))
                if padded:  # a row the pipeline drops
                    out.append((x[r] * 0, y[r] * 0, np.False_))
        return out

    def make_dataset(epoch: int) -> object:
        count, index = jax.process_count(), jax.process_index()
        if kind == "grain-elastic":
            source = grain.MapDataset.source(rows(epoch, GLOBAL_BATCH, 0, False))
            return grain.experimental.ElasticIterator(
                source.map(lambda e: (e[0], e[1])),
                global_batch_size=GLOBAL_BATCH,
                shard_options=grain.sharding.ShardOptions(index, count),
                read_options=grain.ReadOptions(num_threads=2),
            )
        share = GLOBAL_BATCH // count if kind == "grain-per-process" else GLOBAL_BATCH
        first = index * share if kind == "grain-per-process" else 0
        padded = kind == "grain-per-process" and index == 1
        ds = grain.MapDataset.source(rows(epoch, share, first, padded))
        ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=2))
        ds = ds.filter(lambda e: bool(e[2])).map(lambda e: (e[0], e[1]))
        return ds.batch(share, drop_remainder=True)

    return make_dataset


def build_state() -> dict[str, object]:
    model = build_model()
    optimizer = model.optimizer  # type: ignore[attr-defined]
    optimizer.build(model.trainable_variables)  # type: ignore[attr-defined]
    return {"model": model, "optimizer": optimizer}


def make_train_step() -> object:
    """One step for every device of every process: stateless, under jit."""
    from stateless_step import jax_train_step

    return jax_train_step()


def keras_train_step(state, batch):  # type: ignore[no-untyped-def]
    """Keras' own step: ``train_on_batch`` takes this process's rows."""
    import colab_resume as cr

    x, y = cr.process_rows(batch)
    return {"loss": state["model"].train_on_batch(x, y)}


def build_model() -> object:
    import keras

    model = keras.Sequential(
        [
            keras.Input((5,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dropout(0.25),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    return model


def shard_across_processes() -> None:
    """The user's ``ModelParallel``, set once the processes joined: a mesh
    of (processes, devices each) whose ``"batch"`` axis runs across the
    processes (each feeds its own rows), and the first Dense kernel and bias
    split over that axis too, as FSDP shards weights over the data axis: so
    each process holds pieces of the state no other one does."""
    import jax
    import keras

    devices = keras.distribution.list_devices()
    shape = (jax.process_count(), len(devices) // jax.process_count())
    mesh = keras.distribution.DeviceMesh(shape, ("batch", "model"), devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*/dense/kernel"] = (None, "batch")
    layout_map[".*/dense/bias"] = ("batch",)
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    )


def whole(value: object) -> object:
    """``value`` as one host array, gathered from every process if sharded."""
    import numpy as np
    from jax.experimental import multihost_utils

    if getattr(value, "is_fully_addressable", True):
        return np.asarray(value)
    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--process", type=int, required=True)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--dead-after", type=float, default=4.0)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--steps-per-epoch", type=int, default=STEPS_PER_EPOCH)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--save-every-seconds", type=float, default=None)
    parser.add_argument("--stop-at", type=int, default=None)
    parser.add_argument("--stop-process", type=int, default=None)
    parser.add_argument("--loop", choices=("fit", "run", "run-keras"), default="fit")
    parser.add_argument("--data", choices=DATA_SHARDING, default="global")
    parser.add_argument("--change-shard", default=None)
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--model-parallel", action="store_true")
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = "jax"
    # Run by hand too (docs/guide/multi-host.md): this tree's colab_resume.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

    import keras

    from colab_resume import Agent

    keras.utils.set_random_seed(1234)
    # One process: no distributed runtime at all, as on a single host.
    cluster = (
        dict(
            coordinator_address=f"127.0.0.1:{args.port}",
            num_processes=args.processes,
            process_id=args.process,
            peer_dead_after_seconds=args.dead_after,
            data_sharding=DATA_SHARDING[args.data],
            start_timeout_seconds=args.start_timeout,
        )
        if args.processes > 1
        else {}
    )
    agent = Agent(
        args.run_dir,
        prefer="cpu",
        cpu_replicas=args.devices,
        save_every_steps=2,
        save_every_seconds=args.save_every_seconds,
        heartbeat_seconds=1.0,
        **cluster,  # type: ignore[arg-type]
    )

    if args.model_parallel:
        shard_across_processes()

    def on_step(step: int) -> None:
        print(f"STEP {step}", flush=True)
        if step == args.stop_at and args.process == args.stop_process:
            agent.stop()  # this process alone: the others learn it by agreement
        if args.step_delay:
            time.sleep(args.step_delay)

    agent.on_step(on_step)
    data: object = make_dataset
    if args.data == "per-process":
        which, _, how = (args.change_shard or ":").partition(":")
        data = own_rows(make_dataset, how if which == str(args.process) else None)
    elif args.data.startswith("grain"):
        data = grain_data(make_dataset, args.data)
    if args.loop == "fit":
        agent.fit(
            build_model,
            data,
            epochs=args.epochs,
            steps_per_epoch=args.steps_per_epoch,
            verbose=0,
        )
        model, optimizer = agent.model, agent.model.optimizer
    else:
        state = agent.run(
            build_state,
            data,  # type: ignore[arg-type]
            keras_train_step if args.loop == "run-keras" else make_train_step(),  # type: ignore[arg-type]
            total_steps=args.epochs * args.steps_per_epoch,
            steps_per_epoch=args.steps_per_epoch,
        )
        model, optimizer = state["model"], state["optimizer"]
    import numpy as np

    variables = [*model.variables, *optimizer.variables]  # type: ignore[attr-defined]
    values = [whole(v.value) for v in variables]
    os.makedirs(args.out_dir, exist_ok=True)
    np.savez(
        os.path.join(args.out_dir, f"weights.p{args.process}.npz"),
        *values,
    )
    restored = [e for e in agent.events.recent(200) if e.kind == "run.resumed_at"]
    changed = [
        e.message for e in agent.events.recent(200) if e.kind == "run.runtime_changed"
    ]
    with open(os.path.join(args.out_dir, f"result.p{args.process}.json"), "w") as f:
        json.dump(
            {
                "resumed_at": restored[-1].step if restored else None,
                "changes": changed,
                "stopped": agent.stopped,
                "positioned": [
                    e.message
                    for e in agent.events.recent(200)
                    if e.kind == "data.positioned"
                ],
                "committed": [
                    e.step
                    for e in agent.events.recent(500)
                    if e.kind == "checkpoint.committed"
                ],
            },
            f,
        )
    print("EXIT", flush=True)


if __name__ == "__main__":
    main()
