"""The JAX custom loop's step of the on_jax workers: stateless, under ``jax.jit``.

The same code trains on one device, on every device of one process and on
every device of every process (the batch it gets is the global one).
"""

from __future__ import annotations


def jax_train_step():  # type: ignore[no-untyped-def]
    """One step for all devices: stateless call and apply, then assign."""
    import jax
    import keras

    loss_fn = keras.losses.BinaryCrossentropy()
    compiled: dict[int, object] = {}  # a rebuilt model gets its own program

    def compile_for(model, optimizer):  # type: ignore[no-untyped-def]
        def loss_of(trainable, other, x, y):  # type: ignore[no-untyped-def]
            predicted, other = model.stateless_call(trainable, other, x, training=True)
            return loss_fn(y, predicted), other

        gradient = jax.value_and_grad(loss_of, has_aux=True)

        @jax.jit
        def step(trainable, other, slots, x, y):  # type: ignore[no-untyped-def]
            (loss, other), grads = gradient(trainable, other, x, y)
            trainable, slots = optimizer.stateless_apply(slots, grads, trainable)
            return loss, trainable, other, slots

        return step

    def train_step(state, batch):  # type: ignore[no-untyped-def]
        model, optimizer = state["model"], state["optimizer"]
        step = compiled.setdefault(id(model), compile_for(model, optimizer))
        groups = (
            model.trainable_variables,
            model.non_trainable_variables,
            optimizer.variables,
        )
        loss, *new = step(*([v.value for v in g] for g in groups), *batch)  # type: ignore[operator]
        for variables, values in zip(groups, new, strict=True):
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)
        return {"loss": loss}

    return train_step
