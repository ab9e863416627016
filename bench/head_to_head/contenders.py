"""The contenders, each trained the way its own documentation says.

- ``plain_fit`` / ``plain_loop``: no checkpoints at all (the baselines).
- ``bar``: ``model.fit`` with ``keras.callbacks.BackupAndRestore(dir,
  save_freq=N)``; resume = run the same script again.
- ``tfcm`` / ``tfcm_async``: a hand-written ``strategy.run`` loop with
  ``tf.train.Checkpoint(model=, optimizer=, step=)`` and
  ``tf.train.CheckpointManager``; resume = ``ckpt.restore(
  manager.latest_checkpoint)`` and skip the epoch's batches already done.
  ``tfcm_async`` passes ``CheckpointOptions(
  experimental_enable_async_checkpoint=True)`` to every save, and (because
  the documented form crashes at the second save) checkpoints the
  ``tf.Variable`` under each Keras variable instead of ``model=``.
- ``cr_gcs`` / ``cr_local``: ``colab_resume.Agent.fit`` on the GCS emulator or
  a local directory; resume = run the same script again.

Each ``train_*`` returns the trained ``keras.Model``; all of them call
``faults.after_step(global_step)`` after every step and route every save
through ``faults.timed_save`` so blocking time and kills-in-save are the
same measurement for everyone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from faults import Faults
from workload import BATCH, Data, Schedule, build_model


@dataclasses.dataclass(frozen=True, kw_only=True)
class Context:
    """What every contender gets."""

    strategy: Any
    data: Data
    schedule: Schedule
    faults: Faults
    directory: str


def _step_callback(ctx: Context) -> Any:
    """A Keras callback reporting global steps to the fault plan."""
    import keras

    spe = ctx.schedule.steps_per_epoch

    class StepReporter(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            ctx.faults.after_step(self.epoch * spe + batch + 1)

    return StepReporter()


def _fit_dataset(ctx: Context) -> Any:
    # One dataset for a single model.fit call; Keras iterates it again each
    # epoch, and its order is the same every time (see workload).
    return ctx.data.make_dataset(0).take(ctx.schedule.steps_per_epoch)


def train_plain_fit(ctx: Context) -> Any:
    with ctx.strategy.scope():
        model = build_model()
    ctx.faults.started(0)
    model.fit(
        _fit_dataset(ctx),
        epochs=ctx.schedule.epochs,
        callbacks=[_step_callback(ctx)],
        verbose=0,
    )
    return model


def train_bar(ctx: Context) -> Any:
    import keras

    faults = ctx.faults

    class TimedBackupAndRestore(keras.callbacks.BackupAndRestore):
        """BackupAndRestore whose saves are timed (and may be killed) like the rest."""

        def _save_model(self) -> None:
            faults.timed_save(faults.step, super()._save_model)

    with ctx.strategy.scope():
        model = build_model()
    faults.started(0)
    # The reporter goes first so that the step a save belongs to is known.
    callbacks = [
        _step_callback(ctx),
        TimedBackupAndRestore(ctx.directory, save_freq=ctx.schedule.save_every),
    ]
    model.fit(
        _fit_dataset(ctx), epochs=ctx.schedule.epochs, callbacks=callbacks, verbose=0
    )
    return model


def train_loop(ctx: Context, mode: str) -> Any:
    """The hand-written loop; ``mode`` is ``none``, ``sync`` or ``async``."""
    import keras
    import tensorflow as tf

    strategy, schedule, faults = ctx.strategy, ctx.schedule, ctx.faults
    with strategy.scope():
        model = build_model()
        optimizer = model.optimizer
        # Create the Adam slots now, so restore has real variables to fill.
        optimizer.build(model.trainable_variables)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    if mode == "async":
        # TF's async save of a Keras 3 model, as documented, dies at the
        # second save: Keras's async hook creates a tf.Variable inside a
        # tf.function ("only supports singleton tf.Variables"). The known
        # workaround: checkpoint the tf.Variables under the Keras variables.
        # That also covers every variable (Dropout's RNG state included).
        everything = list(model.variables) + list(optimizer.variables)
        ckpt = tf.train.Checkpoint(
            variables={f"{i:04d}": v.value for i, v in enumerate(everything)},
            step=step_var,
        )
    else:
        ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
    faults.settle = ckpt.sync  # waits for an async write in flight
    manager = None
    if mode != "none":
        manager = tf.train.CheckpointManager(ckpt, ctx.directory, max_to_keep=3)
        if manager.latest_checkpoint:
            ckpt.restore(manager.latest_checkpoint)
    options = tf.train.CheckpointOptions(
        experimental_enable_async_checkpoint=(mode == "async")
    )

    def replica_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(
                y, logits, from_logits=True
            )
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(batch: Any) -> None:
        strategy.run(replica_step, args=batch)
        step_var.assign_add(1)

    start = int(step_var.numpy())
    faults.started(start)
    spe = schedule.steps_per_epoch
    for epoch in range(start // spe, schedule.epochs):
        skip = start % spe if epoch == start // spe else 0
        dataset = ctx.data.make_dataset(epoch, skip=skip).take(spe - skip)
        for batch in strategy.experimental_distribute_dataset(dataset):
            train_step(batch)
            step = int(step_var.numpy())
            if manager is not None and step % schedule.save_every == 0:
                faults.timed_save(
                    step,
                    lambda step=step: manager.save(
                        checkpoint_number=step, options=options
                    ),
                )
            faults.after_step(step)
    ckpt.sync()
    return model


def train_cr(ctx: Context, agent: Any) -> Any:
    from colab_resume.checkpoint import manager as cr_manager

    faults = ctx.faults
    original_save = cr_manager.CheckpointManager.save

    # The agent's own save entry point, wrapped: the only way to time it and
    # to kill inside it from outside the package.
    def save(self: Any, state: Any, *, step: int, **kwargs: Any) -> Any:
        return faults.timed_save(
            step, lambda: original_save(self, state, step=step, **kwargs)
        )

    cr_manager.CheckpointManager.save = save  # type: ignore[method-assign]
    faults.started(0)
    agent.fit(
        build_model,
        ctx.data.make_dataset,
        epochs=ctx.schedule.epochs,
        steps_per_epoch=ctx.schedule.steps_per_epoch,
        callbacks=[_step_callback(ctx)],
        verbose=0,
    )
    return agent.model
