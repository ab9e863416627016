"""A training process for tests that kill it for real.

    PYTHONPATH=tests python tests/workers/agent_worker.py RUN_DIR OUT.npz
        [--endpoint URL] [--loop fit|run]
        [--kill-at-step N] [--unavailable-at-step N] [--epochs E] ...
        [--retry-seconds S] [--step-sleep S] [--takeover] [--run-id ID] [--plain]
        [--unseeded-shuffle] [--reset-data-fingerprints]
        [--expiring-token] [--events EVENTS.json] [--tick-seconds S]
        [--stop-at-step N] [--raise-at-step N] [--skip-mode MODE]
        [--user-strategy passed|entered]

Trains a small Keras model (Dense, Dropout, BatchNormalization, Adam) under a
2-replica MirroredStrategy on CPU with op determinism, through
``Agent.fit`` or ``Agent.run``, and writes every model and optimizer
variable to OUT.npz so runs can be compared bitwise. ``--kill-at-step``
SIGKILLs the process itself right after that step (no cleanup at all);
``--unavailable-at-step`` raises ``tf.errors.UnavailableError`` there once,
as a lost TPU would. ``--events`` writes every event of the agent as JSON
when the process ends (also on an error), for chaos tests to count;
``--expiring-token`` authenticates with
:class:`support.fake_credentials.ExpiringCredentials` (for a token-checking proxy)
and prints how often it refreshed. ``--tick-seconds`` spaces the agent's
ticks (history samples and chunks): a large value makes a session killed
mid-run leave no history chunk at all, as one killed in its first seconds.
``--stop-at-step`` calls ``agent.stop()`` there, ``--raise-at-step`` raises
a ``RuntimeError`` (a bug in the user's code): the exit-status tests read
how the process ends. Every step prints ``STEP N`` when ``--print-steps``.
``--skip-mode`` makes ``make_dataset``'s ``skip`` honoured (``right``, the
default), accepted and not used (``ignored``) or one batch early
(``off-by-one``). ``--user-strategy`` makes the same MirroredStrategy the
user's own: passed as ``strategy=``, or its ``scope()`` entered around the
agent's calls.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

EXAMPLES = 512
BATCH = 16


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--endpoint")
    parser.add_argument("--loop", choices=["fit", "run"], default="fit")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=12)
    parser.add_argument("--save-every-steps", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--kill-at-step", type=int)
    # Stop training (the heartbeat goes on) after this step's duties, until
    # killed: a test then kills it at a known step, however loaded the machine.
    parser.add_argument("--hang-at-step", type=int)
    parser.add_argument("--unavailable-at-step", type=int)
    parser.add_argument("--unseeded-shuffle", action="store_true")
    parser.add_argument("--reset-data-fingerprints", action="store_true")
    parser.add_argument("--width", type=int, default=32)
    # Dense layers only: no Dropout masks or per-replica BatchNorm statistics,
    # so runs on different replica counts train the same model.
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--retry-seconds", type=float, default=120.0)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--heartbeat-seconds", type=float, default=0.5)
    parser.add_argument("--takeover", action="store_true")
    parser.add_argument("--run-id")
    parser.add_argument("--expiring-token", action="store_true")
    parser.add_argument("--events")
    parser.add_argument("--tick-seconds", type=float)
    parser.add_argument("--stop-at-step", type=int)
    parser.add_argument("--raise-at-step", type=int)
    parser.add_argument("--print-steps", action="store_true")
    parser.add_argument("--user-strategy", choices=["passed", "entered"])
    parser.add_argument(
        "--skip-mode", choices=["right", "ignored", "off-by-one"], default="right"
    )
    return parser.parse_args()


def users_mirrored(tf, replicas: int):  # type: ignore[no-untyped-def]
    """The user's own MirroredStrategy over ``replicas`` logical CPUs, made
    as a user would, before the agent connects."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
    )
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(names)


def main() -> int:
    args = parse()
    import keras
    import tensorflow as tf

    user_strategy = users_mirrored(tf, args.replicas) if args.user_strategy else None
    from support import toy
    from support.dying import kill_if_at

    from colab_resume.agent import Agent
    from colab_resume.exit_status import exit_code

    keras.utils.set_random_seed(7)
    tf.config.experimental.enable_op_determinism()
    x, y = toy.regression(EXAMPLES)

    def make_dataset(epoch: int, skip: int = 0) -> tf.data.Dataset:
        # "Unseeded" must differ between processes even under set_random_seed.
        seed = (
            int.from_bytes(os.urandom(4), "little") if args.unseeded_shuffle else epoch
        )
        first = {"right": skip, "ignored": 0}.get(args.skip_mode, max(skip - 1, 0))
        return toy.epoch_batches(x, y, BATCH, seed).skip(first)

    def build_model() -> keras.Model:
        return toy.model(
            width=args.width,
            dropout=None if args.plain else 0.25,
            batch_norm=not args.plain,
        )

    steps_done = {"n": 0, "raised": False}

    def faults(step: int) -> None:
        kill_if_at(step, args.kill_at_step)
        if step == args.hang_at_step:
            print(f"HANGING at step {step}", flush=True)
            time.sleep(3600)
        if (
            args.unavailable_at_step is not None
            and step == args.unavailable_at_step
            and not steps_done["raised"]
        ):
            steps_done["raised"] = True
            raise tf.errors.UnavailableError(None, None, "Socket closed")

    from support.drive_emulator import emulator_options

    options = emulator_options(args.run_dir, args.endpoint) if args.endpoint else None
    credentials = None
    if args.expiring_token and options:
        from support.fake_credentials import ExpiringCredentials

        credentials = options["token"] = ExpiringCredentials()
    agent = Agent(
        args.run_dir,
        save_every_steps=args.save_every_steps,
        save_every_seconds=None,
        heartbeat_seconds=args.heartbeat_seconds,
        dead_after_seconds=3 * args.heartbeat_seconds,
        storage_options=options,
        prefer="cpu",
        cpu_replicas=args.replicas,
        strategy=user_strategy if args.user_strategy == "passed" else None,
        recovery_backoff_seconds=0.1,
        storage_retry_seconds=args.retry_seconds,
        takeover=args.takeover,
        run_id=args.run_id,
        reset_data_fingerprints=args.reset_data_fingerprints,
    )
    if args.events:
        import atexit
        import json

        seen: list = []

        def record(event) -> None:
            seen.append(event)  # all of them: recent() keeps only 500
            if event.kind in (
                "checkpoint.restored",
                "checkpoint.committed",
                "checkpoint.waiting",
            ):
                print(f"EVENT {event.kind} step={event.step}", flush=True)
            if event.kind == "run.stopped":
                outcome = event.data.get("outcome")
                print(f"EVENT {event.kind} step={event.step} {outcome}", flush=True)
            if event.kind == "preemption.notice":
                print(f"EVENT {event.kind} {event.data.get('path')}", flush=True)
            if event.kind == "data.fingerprints_reset":
                print(f"EVENT {event.kind} {event.message}", flush=True)
            if event.kind == "lease.taken":
                print(f"LEASE {event.data['lease']}", flush=True)
            if event.kind == "heartbeat.failed" and event.level == "error":
                print(f"EVENT {event.kind} level=error", flush=True)

        agent.events.subscribe(record)

        def dump_events() -> None:
            with open(args.events, "w") as handle:
                json.dump([e.to_json() for e in seen], handle)

        atexit.register(dump_events)  # runs on errors too, not on SIGKILL

    # Fault points go right after the agent's own per-step duties (so a kill
    # at a save step lands while that checkpoint uploads). No real TPU exists
    # here to lose: the step hook raises what a lost one would.
    def after_step(step: int) -> None:
        steps_done["n"] += 1
        if args.print_steps:
            print(f"STEP {step}", flush=True)
        faults(step)
        if step == args.stop_at_step:
            agent.stop()
        if step == args.raise_at_step:
            # The message a user's error carries may be set from outside.
            said = os.environ.get("AGENT_WORKER_ERROR", "").strip()
            raise RuntimeError(f"a bug at step {step}" + (f": {said}" if said else ""))
        if args.step_sleep:
            time.sleep(args.step_sleep)  # a slower "model": faults land mid-run

    agent.on_step(after_step)
    if args.tick_seconds is not None:
        agent._loop.progress.interval = args.tick_seconds  # internal: the tick's knob

    entered = user_strategy.scope() if args.user_strategy == "entered" else None
    if entered is not None:
        entered.__enter__()  # the user's scope around the agent's calls
    if args.loop == "fit":
        history = agent.fit(
            build_model,
            make_dataset,
            epochs=args.epochs,
            steps_per_epoch=args.steps_per_epoch,
            verbose=0,
        )
        model = agent.model
        print(f"HISTORY {history.epoch}", flush=True)
        variables = list(model.variables) + list(model.optimizer.variables)
    else:

        def build_state() -> dict:
            model = build_model()
            return {"model": model, "optimizer": model.optimizer}

        def train_step(state: dict, batch) -> dict:
            features, labels = batch
            model, optimizer = state["model"], state["optimizer"]
            with tf.GradientTape() as tape:
                predictions = model(features, training=True)
                per_example = tf.reduce_mean(tf.square(predictions - labels), axis=-1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(
                zip(grads, model.trainable_variables, strict=True)
            )
            return {"loss": loss}

        state = agent.run(
            build_state,
            make_dataset,
            train_step,
            total_steps=args.epochs * args.steps_per_epoch,
            steps_per_epoch=args.steps_per_epoch,
        )
        model = state["model"]
        variables = list(model.variables) + list(state["optimizer"].variables)

    toy.save_variables(args.out, variables)
    if credentials is not None:
        print(f"REFRESHES {credentials.refreshes}", flush=True)
    print(
        f"DONE recoveries={agent.recoveries} steps_here={steps_done['n']}", flush=True
    )
    # How a script hands its launcher the status (0 here unless stop() ended it).
    return exit_code(agent)


if __name__ == "__main__":
    sys.exit(main())
