"""Training code in the shapes people copy from the public Keras examples.

Written by us after their patterns, shrunk to seconds on a CPU: a convnet
with the callbacks people pass and validation data, a GAN whose model
overrides ``compile`` and ``train_step`` with two optimizers and has no
``call()``, a VAE with custom metric trackers, and a model under a
mixed-precision policy with an adapted ``Normalization`` layer. Each
``Workload`` gives the arguments of ``agent.fit`` and what to compare.

Every workload draws its randomness from Keras ``SeedGenerator``s (or
seeded ``tf.data``), so an uninterrupted run is reproducible bitwise on
CPU with op determinism; the agent must make a killed-and-resumed one so.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf


@dataclasses.dataclass
class Workload:
    build_model: Callable[[], keras.Model]
    make_dataset: Callable[..., Any]
    epochs: int
    steps_per_epoch: int
    callbacks: list[Any] = dataclasses.field(default_factory=list)
    fit_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    files: list[str] = dataclasses.field(default_factory=list)  # side effects


def _batches(arrays: tuple[np.ndarray, ...], batch: int, epoch: int, skip: int):
    ds = tf.data.Dataset.from_tensor_slices(arrays)
    ds = ds.shuffle(len(arrays[0]), seed=epoch)
    return ds.batch(batch, drop_remainder=True).skip(skip)


# --- a convnet with the common callbacks, validation monitored ------------------


class CallTrace(keras.callbacks.Callback):
    """Records every callback event; carries that record across deaths.

    A user callback with instance state, written to the agent's documented
    protocol (``get_resume_state`` / ``set_resume_state``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def get_resume_state(self) -> dict:
        return {"calls": list(self.calls)}

    def set_resume_state(self, state: dict) -> None:
        self.calls = list(state["calls"])

    def on_train_begin(self, logs=None):
        self.calls.append("train_begin")

    def on_train_end(self, logs=None):
        self.calls.append("train_end")

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append(f"epoch_begin {epoch}")

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(f"epoch_end {epoch} {sorted(logs or {})}")

    def on_train_batch_begin(self, batch, logs=None):
        self.calls.append(f"batch_begin {batch}")

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(f"batch_end {batch} {sorted(logs or {})}")

    def on_test_begin(self, logs=None):
        self.calls.append("test_begin")


def convnet(out_dir: str) -> Workload:
    rng = np.random.RandomState(1)
    # Random labels: validation loss rises soon, so EarlyStopping and
    # ReduceLROnPlateau act within a few epochs.
    x = rng.rand(128, 8, 8, 1).astype("float32")
    y = rng.randint(0, 3, size=(128,)).astype("int32")
    x_val = rng.rand(32, 8, 8, 1).astype("float32")
    y_val = rng.randint(0, 3, size=(32,)).astype("int32")

    def build_model() -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                keras.layers.Conv2D(4, 3, activation="relu"),
                keras.layers.MaxPooling2D(2),
                keras.layers.Flatten(),
                keras.layers.Dropout(0.3),
                keras.layers.Dense(3, activation="softmax"),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(3e-2),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        return model

    def schedule(epoch: int, lr: float) -> float:
        # The Keras docs' shape: depends on the current learning rate.
        return lr if epoch < 2 else lr * 0.9

    csv = os.path.join(out_dir, "log.csv")
    best = os.path.join(out_dir, "best.weights.h5")
    callbacks = [
        keras.callbacks.LearningRateScheduler(schedule),
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1),
        keras.callbacks.EarlyStopping(
            monitor="val_loss", patience=3, restore_best_weights=True
        ),
        keras.callbacks.ModelCheckpoint(
            best, monitor="val_loss", save_best_only=True, save_weights_only=True
        ),
        keras.callbacks.CSVLogger(csv),
        keras.callbacks.TerminateOnNaN(),
        CallTrace(),
    ]
    val = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(16)
    return Workload(
        build_model,
        lambda epoch, skip=0: _batches((x, y), 16, epoch, skip),
        epochs=12,
        steps_per_epoch=8,
        callbacks=callbacks,
        fit_kwargs={"validation_data": val},
        files=[csv, best],
    )


# --- a GAN: two optimizers, overridden compile and train_step, no call() ------------


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim: int) -> None:
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def train_step(self, real):
        batch = tf.shape(real)[0]
        noise = keras.random.normal((batch, self.latent_dim), seed=self.seed_generator)
        fake = self.generator(noise)
        both = tf.concat([fake, real], axis=0)
        labels = tf.concat([tf.ones((batch, 1)), tf.zeros((batch, 1))], axis=0)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(both))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(
            zip(grads, self.discriminator.trainable_weights, strict=True)
        )
        noise = keras.random.normal((batch, self.latent_dim), seed=self.seed_generator)
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(
                tf.zeros((batch, 1)), self.discriminator(self.generator(noise))
            )
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(
            zip(grads, self.generator.trainable_weights, strict=True)
        )
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {m.name: m.result() for m in self.metrics}


def gan(out_dir: str) -> Workload:
    real = np.random.RandomState(2).randn(128, 6).astype("float32")

    def build_model() -> keras.Model:
        discriminator = keras.Sequential(
            [keras.Input((6,)), keras.layers.Dense(8), keras.layers.LeakyReLU(0.2)]
            + [keras.layers.Dense(1)]
        )
        generator = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(8, activation="relu")]
            + [keras.layers.Dense(6)]
        )
        model = GAN(discriminator, generator, latent_dim=3)
        model.compile(
            d_optimizer=keras.optimizers.Adam(1e-3, beta_1=0.5),
            g_optimizer=keras.optimizers.Adam(2e-3, beta_1=0.5),
            loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
        )
        return model

    def make_dataset(epoch: int, skip: int = 0):
        ds = tf.data.Dataset.from_tensor_slices(real).shuffle(128, seed=epoch)
        return ds.batch(16, drop_remainder=True).skip(skip)

    return Workload(build_model, make_dataset, epochs=4, steps_per_epoch=8)


# --- a VAE: sampling layer, custom metric trackers -------------------------------


class Sampling(keras.layers.Layer):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(7)

    def call(self, inputs):
        mean, log_var = inputs
        eps = keras.random.normal(tf.shape(mean), seed=self.seed_generator)
        return mean + tf.exp(0.5 * log_var) * eps


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs) -> None:
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
        self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction")
        self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [
            self.total_loss_tracker,
            self.reconstruction_loss_tracker,
            self.kl_loss_tracker,
        ]

    def train_step(self, data):
        with tf.GradientTape() as tape:
            mean, log_var, z = self.encoder(data)
            rebuilt = self.decoder(z)
            reconstruction = tf.reduce_mean(tf.reduce_sum(tf.square(data - rebuilt), 1))
            kl = -0.5 * (1 + log_var - tf.square(mean) - tf.exp(log_var))
            kl = tf.reduce_mean(tf.reduce_sum(kl, axis=1))
            total = reconstruction + kl
        grads = tape.gradient(total, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
        self.total_loss_tracker.update_state(total)
        self.reconstruction_loss_tracker.update_state(reconstruction)
        self.kl_loss_tracker.update_state(kl)
        return {m.name: m.result() for m in self.metrics}


def vae(out_dir: str) -> Workload:
    data = np.random.RandomState(3).rand(128, 10).astype("float32")

    def build_model() -> keras.Model:
        inputs = keras.Input((10,))
        hidden = keras.layers.Dense(8, activation="relu")(inputs)
        mean = keras.layers.Dense(2)(hidden)
        log_var = keras.layers.Dense(2)(hidden)
        z = Sampling()([mean, log_var])
        encoder = keras.Model(inputs, [mean, log_var, z])
        latent = keras.Input((2,))
        decoder = keras.Model(
            latent, keras.layers.Dense(10)(keras.layers.Dense(8)(latent))
        )
        model = VAE(encoder, decoder)
        model.compile(optimizer=keras.optimizers.Adam(1e-2))
        return model

    def make_dataset(epoch: int, skip: int = 0):
        ds = tf.data.Dataset.from_tensor_slices(data).shuffle(128, seed=epoch)
        return ds.batch(16, drop_remainder=True).skip(skip)

    return Workload(build_model, make_dataset, epochs=4, steps_per_epoch=8)


# --- mixed precision with loss scaling and an adapted Normalization layer ----------


def mixed_precision(out_dir: str) -> Workload:
    rng = np.random.RandomState(4)
    x = (rng.randn(128, 5) * 3 + 2).astype("float32")
    y = (x @ rng.randn(5, 1)).astype("float32")

    def build_model() -> keras.Model:
        keras.mixed_precision.set_global_policy("mixed_float16")
        norm = keras.layers.Normalization()
        norm.adapt(x)
        model = keras.Sequential(
            [
                keras.Input((5,)),
                norm,
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dense(1, dtype="float32"),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse", metrics=["mae"])
        return model

    return Workload(
        build_model,
        lambda epoch, skip=0: _batches((x, y), 16, epoch, skip),
        epochs=4,
        steps_per_epoch=8,
    )


WORKLOADS: dict[str, Callable[[str], Workload]] = {
    "convnet": convnet,
    "gan": gan,
    "vae": vae,
    "mixed_precision": mixed_precision,
}
