"""Save or restore a model sharded with ``ModelParallel``, with the portable format.

    PYTHONPATH=tests python tests/on_jax/sharded_worker.py save DIR OUT
        [--mesh 2,4] [--width N]
    PYTHONPATH=tests python tests/on_jax/sharded_worker.py restore DIR OUT
        [--mesh 4,2 | --devices 1] [--width N]

``save``: a model whose Dense kernels are sharded over the mesh's
``"model"`` axis (8 CPU devices), weights drawn at random, written by
:class:`ArrayState` to ``DIR/ckpt``; OUT gets ``weights.npz`` (every model
and optimizer variable, read whole) and ``result.json``: the state's bytes
and the peak of host memory the save allocated (``tracemalloc``: NumPy
reports its buffers).

``restore``: the same model built on another mesh (or one device), read
back from ``DIR``; OUT gets the weights read back and each kernel's
partition spec and per-device shard shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tracemalloc


def build(mesh: str | None, width: int):  # type: ignore[no-untyped-def]
    import keras
    from mesh_worker import set_distribution  # the same user's ModelParallel

    if mesh is not None:
        set_distribution(mesh)
    model = keras.Sequential(
        [
            keras.Input((width,)),
            keras.layers.Dense(width, name="dense_a"),
            keras.layers.Dense(width, name="dense_b"),
            keras.layers.Dense(1, name="out"),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["save", "restore"])
    parser.add_argument("directory")
    parser.add_argument("out_dir")
    parser.add_argument("--mesh", default="2,4")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = "jax"
    flag = f"--xla_force_host_platform_device_count={args.devices}"
    os.environ["XLA_FLAGS"] = flag

    import numpy as np
    from support.processes import write_out

    from colab_resume.checkpoint.formats.portable import ArrayState

    mesh = args.mesh if args.devices > 1 else None
    model = build(mesh, args.width)
    prefix = os.path.join(args.directory, "ckpt")
    result: dict[str, object] = {}
    if args.action == "save":
        rng = np.random.default_rng(7)
        for variable in [*model.variables, *model.optimizer.variables]:
            shape = tuple(variable.shape)
            variable.assign(rng.normal(size=shape).astype(variable.dtype))
        os.makedirs(args.directory, exist_ok=True)
        state = ArrayState(model)
        tracemalloc.start()
        state.write(prefix)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result.update(nbytes=state.nbytes, peak=peak, written=state.written)
        with open(os.path.join(args.directory, "structure.json"), "w") as handle:
            json.dump(state.structure, handle)
    else:
        with open(os.path.join(args.directory, "structure.json")) as handle:
            saved = json.load(handle)
        ArrayState(model).restore(prefix, saved)
        result["shards"] = {
            v.path: sorted({tuple(s.data.shape) for s in v.value.addressable_shards})
            for v in model.variables
            if "kernel" in v.path
        }
        result["specs"] = {
            v.path: list(getattr(v.value.sharding, "spec", []) or [])
            for v in model.variables
            if "kernel" in v.path
        }
    os.makedirs(args.out_dir, exist_ok=True)
    write_out(args.out_dir, model, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
