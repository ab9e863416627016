"""Run one workload of ``workloads.py`` through ``agent.fit``, maybe dying on the way.

    PYTHONPATH=tests python tests/examples/worker.py WORKLOAD RUN_DIR OUT_DIR
        [--kill-at-step N] [--save-every-steps N] [--replicas N] [--epochs N]

OUT_DIR receives ``weights.npz`` (every model variable and every optimizer's
variables, by position) and ``result.json`` (History, the step this process
resumed from, the steps it trained, the callbacks' side-effect files, the
call trace, the agent's warnings). The callbacks' own files (CSV log, best
weights) are written in OUT_DIR too, so a resumed process continues them.
``--kill-at-step`` SIGKILLs the process right after the agent's duties of
that step: no cleanup at all. ``--unavailable-at-step`` raises
``tf.errors.UnavailableError`` there once, as a lost TPU would (no TPU
exists here to lose), for the agent to recover in the same process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def optimizers_of(model) -> list:
    import keras

    found = [model.optimizer] if model.optimizer is not None else []
    for value in vars(model).values():
        if isinstance(value, keras.optimizers.Optimizer) and value not in found:
            found.append(value)
    return found


def file_digest(path: str) -> object:
    """CSV text as is; an HDF5 weights file as a digest of its arrays."""
    if not os.path.exists(path):
        return None
    if path.endswith(".h5"):
        import h5py

        digest = hashlib.sha256()

        def visit(name: str, obj: object) -> None:
            if isinstance(obj, h5py.Dataset):
                digest.update(name.encode() + obj[()].tobytes())

        with h5py.File(path, "r") as handle:
            handle.visititems(visit)
        return digest.hexdigest()
    with open(path) as handle:
        return handle.read()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("run_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--unavailable-at-step", type=int)
    parser.add_argument("--save-every-steps", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--epochs", type=int, help="instead of the workload's")
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf
    from support.dying import kill_if_at
    from workloads import WORKLOADS

    from colab_resume.agent import Agent

    keras.utils.set_random_seed(11)
    tf.config.experimental.enable_op_determinism()
    os.makedirs(args.out_dir, exist_ok=True)
    workload = WORKLOADS[args.workload](args.out_dir)

    trained = {"steps": 0}

    # The kill lands right after the agent's duties of a step (a save step:
    # while its checkpoint uploads). No TPU exists here to lose, so the
    # process kills itself.
    def after_step(step: int) -> None:
        trained["steps"] += 1
        kill_if_at(step, args.kill_at_step)
        if step == args.unavailable_at_step and not trained.get("lost"):
            trained["lost"] = True  # once, as a lost TPU would
            raise tf.errors.UnavailableError(None, None, "Socket closed")

    agent = Agent(
        args.run_dir,
        save_every_steps=args.save_every_steps,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        dead_after_seconds=1.5,
        prefer="cpu",
        cpu_replicas=args.replicas,
        recovery_backoff_seconds=0.1,
    )
    agent.on_step(after_step)
    restored = {"step": 0}

    def on_event(event) -> None:
        if event.kind == "checkpoint.restored":
            restored["step"] = event.step

    agent.events.subscribe(on_event)
    history = agent.fit(
        workload.build_model,
        workload.make_dataset,
        epochs=args.epochs or workload.epochs,
        steps_per_epoch=workload.steps_per_epoch,
        callbacks=workload.callbacks,
        verbose=0,
        **workload.fit_kwargs,
    )
    model = agent.model
    arrays = {f"model_{i:03d}": v.numpy() for i, v in enumerate(model.variables)}
    for k, optimizer in enumerate(optimizers_of(model)):
        for i, v in enumerate(optimizer.variables):
            arrays[f"optimizer{k}_{i:03d}"] = np.asarray(v.numpy())
    np.savez(os.path.join(args.out_dir, "weights.npz"), **arrays)
    traces = [c.calls for c in workload.callbacks if hasattr(c, "calls")]
    result = {
        "history": {"epoch": history.epoch, "history": history.history},
        "restored_step": restored["step"],
        "recoveries": agent.recoveries,
        "steps_here": trained["steps"],
        "files": {os.path.basename(p): file_digest(p) for p in workload.files},
        "calls": traces[0] if traces else None,
        "events": [e.kind for e in agent.events.recent()],
        "warnings": [
            e.message for e in agent.events.recent() if e.kind == "fit.warning"
        ],
    }
    with open(os.path.join(args.out_dir, "result.json"), "w") as handle:
        json.dump(result, handle)
    print(f"DONE steps_here={trained['steps']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
