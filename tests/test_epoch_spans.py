"""Several epochs to one ``model.fit`` call (colab_resume/agent/spans.py).

Real TensorFlow on the CPU, real local run directories, in this process.
A span must change nothing the model or the callbacks see: each epoch
trains on its own ``make_dataset(epoch)``, in order, and the weights, the
History and the callbacks' calls are those of one ``fit`` call per epoch.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow")
import keras  # noqa: E402
from support.toy import at_step  # noqa: E402

import colab_resume as cr  # noqa: E402
from colab_resume.agent import spans  # noqa: E402

X = np.random.RandomState(0).randn(96, 4).astype("float32")
Y = (X @ np.arange(1, 5, dtype="float32")[:, None]).astype("float32")
STEPS = 6  # of 16 examples


def build_model() -> keras.Model:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return model


def make_dataset(epoch: int) -> tf.data.Dataset:
    # A different order every epoch: an epoch fed another epoch's batches
    # would end with other weights.
    ds = tf.data.Dataset.from_tensor_slices((X, Y))
    ds = ds.shuffle(96, seed=epoch, reshuffle_each_iteration=False)
    return ds.batch(16, drop_remainder=True)


class Calls(keras.callbacks.Callback):
    """Every epoch and batch call, with the epoch each batch is trained in."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []
        self.epoch = -1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.calls.append(("epoch_begin", epoch))

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(("batch", self.epoch, batch))

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(("epoch_end", epoch, round(float(logs["loss"]), 6)))


class FitCalls:
    """Counts ``keras.Model.fit`` calls (and the epochs each covered)."""

    def __init__(self, monkeypatch) -> None:
        self.spans: list[tuple[int, int]] = []
        original = keras.Model.fit

        def fit(model, *args, **kwargs):
            self.spans.append((kwargs["initial_epoch"], kwargs["epochs"]))
            return original(model, *args, **kwargs)

        monkeypatch.setattr(keras.Model, "fit", fit)


def train(run_dir, data=make_dataset, epochs=7, **fit_options):
    keras.utils.set_random_seed(3)
    calls = Calls()
    agent = cr.Agent(str(run_dir), save_every_steps=5, prefer="cpu")
    history = agent.fit(
        build_model,
        data,
        epochs=epochs,
        steps_per_epoch=STEPS,
        callbacks=[calls],
        verbose=0,
        **fit_options,
    )
    weights = [v.numpy() for v in agent.model.variables]
    agent.close()
    return weights, history, calls.calls


def test_spans_grow_and_train_exactly_as_one_fit_per_epoch(tmp_path, monkeypatch):
    counted = FitCalls(monkeypatch)
    weights, history, calls = train(tmp_path / "spans")
    # 1, then 2, then 4 epochs (the last span cut at the run's end).
    assert counted.spans == [(0, 1), (1, 3), (3, 7)]

    monkeypatch.setattr(spans, "MAX_EPOCHS", 1)
    counted.spans.clear()
    alone, alone_history, alone_calls = train(tmp_path / "alone")
    assert counted.spans == [(e, e + 1) for e in range(7)]

    for a, b in zip(weights, alone, strict=True):
        np.testing.assert_array_equal(a, b)
    assert history.history == alone_history.history
    assert history.epoch == list(range(7))
    assert calls == alone_calls
    assert [c[1:] for c in calls if c[0] == "batch"] == [
        (e, b) for e in range(7) for b in range(STEPS)
    ]


def test_a_dataset_of_unknown_length_gets_one_fit_per_epoch(tmp_path, monkeypatch):
    # filter() hides the length: concatenated, a short epoch would borrow
    # the next epoch's batches, so it is never chained.
    counted = FitCalls(monkeypatch)

    def filtered(epoch):
        return make_dataset(epoch).filter(lambda x, y: True)

    _, history, _ = train(tmp_path / "run", data=filtered, epochs=4)
    assert counted.spans == [(e, e + 1) for e in range(4)]
    assert history.epoch == [0, 1, 2, 3]


def test_validation_made_per_epoch_gets_one_fit_per_epoch(tmp_path, monkeypatch):
    counted = FitCalls(monkeypatch)
    seen = []

    def validation(epoch):
        seen.append(epoch)
        return tf.data.Dataset.from_tensor_slices((X[:32], Y[:32])).batch(16)

    _, history, _ = train(tmp_path / "run", epochs=3, validation_data=validation)
    assert counted.spans == [(0, 1), (1, 2), (2, 3)]
    assert seen == [0, 1, 2] and len(history.history["val_loss"]) == 3


def test_a_fixed_validation_set_is_evaluated_after_every_epoch_of_a_span(
    tmp_path, monkeypatch
):
    counted = FitCalls(monkeypatch)
    validation = tf.data.Dataset.from_tensor_slices((X[:32], Y[:32])).batch(16)
    _, history, _ = train(tmp_path / "run", epochs=3, validation_data=validation)
    assert counted.spans == [(0, 1), (1, 3)]
    assert len(history.history["val_loss"]) == 3


def test_early_stopping_inside_a_span_ends_the_run(tmp_path, monkeypatch):
    counted = FitCalls(monkeypatch)

    class StopAfter(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 4:
                self.model.stop_training = True

    agent = cr.Agent(str(tmp_path / "run"), save_every_steps=5, prefer="cpu")
    history = agent.fit(
        build_model,
        make_dataset,
        epochs=9,
        steps_per_epoch=STEPS,
        callbacks=[StopAfter()],
        verbose=0,
    )
    agent.close()
    assert counted.spans == [(0, 1), (1, 3), (3, 7)]
    assert history.epoch == [0, 1, 2, 3, 4]


def test_chain_hides_the_length_and_keeps_the_order():
    parts = [tf.data.Dataset.range(3), tf.data.Dataset.range(10, 12)]
    assert all(spans.chainable(p, len(list(p))) for p in parts)
    chained = spans.chain(parts)
    assert int(chained.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert [int(v) for v in chained] == [0, 1, 2, 10, 11]
    assert not spans.chainable(tf.data.Dataset.range(3).repeat(), 3)
    assert spans.chainable(tf.data.Dataset.range(3).repeat().take(3), 3)
    assert [spans.next_length(n) for n in (1, 2, 4, 8)] == [2, 4, 8, 8]


def test_stopped_inside_a_span_the_rerun_ends_bitwise_equal(tmp_path, monkeypatch):
    counted = FitCalls(monkeypatch)
    whole, whole_history, _ = train(tmp_path / "whole")
    counted.spans.clear()

    keras.utils.set_random_seed(3)
    agent = cr.Agent(str(tmp_path / "run"), save_every_steps=100, prefer="cpu")
    stop = at_step(4 * STEPS + 2, agent.stop)  # epoch 4, inside the span 3..6
    agent.fit(
        build_model,
        make_dataset,
        epochs=7,
        steps_per_epoch=STEPS,
        callbacks=[stop],
        verbose=0,
    )
    agent.close()
    assert counted.spans == [(0, 1), (1, 3), (3, 7)] and agent.stopped
    counted.spans.clear()

    weights, history, _ = train(tmp_path / "run")
    # The resumed epoch alone (it starts at batch 2), then the rest together.
    assert counted.spans == [(4, 5), (5, 7)]
    for a, b in zip(whole, weights, strict=True):
        np.testing.assert_array_equal(a, b)
    assert history.history == whole_history.history


def test_a_dataset_that_reshuffles_each_iteration_is_never_chained(
    tmp_path, monkeypatch
):
    counted = FitCalls(monkeypatch)

    def reshuffled(epoch):  # shuffle's default: a new order at each iteration
        ds = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(96, seed=epoch)
        return ds.batch(16, drop_remainder=True)

    train(tmp_path / "run", data=reshuffled, epochs=3)
    assert counted.spans == [(0, 1), (1, 2), (2, 3)]


def augmented(epoch):
    # A Keras random layer in Dataset.map, made by each make_dataset call:
    # its seed is a variable the map advances at every batch, so what an
    # epoch trains on depends on how often its dataset was iterated before.
    noise = keras.layers.GaussianNoise(0.5, seed=epoch + 1)
    return make_dataset(epoch).map(lambda x, y: (noise(x, training=True), y))


def test_a_keras_random_layer_in_map_gets_one_fit_per_epoch(tmp_path, monkeypatch):
    counted = FitCalls(monkeypatch)
    _, history, calls = train(tmp_path / "run", data=augmented, epochs=4)
    assert counted.spans == [(e, e + 1) for e in range(4)]
    assert history.epoch == [0, 1, 2, 3]
    assert [c[1] for c in calls if c[0] == "epoch_begin"] == [0, 1, 2, 3]


def _reads_python(i):
    return tf.py_function(lambda v: v, [i], tf.int64)


def _images() -> tf.data.Dataset:
    pixels = np.random.RandomState(1).rand(8, 8, 8, 3).astype("float32")
    return tf.data.Dataset.from_tensor_slices(tf.constant(pixels))


def _in_map(layer, **call) -> tf.data.Dataset:
    """A Keras layer made once, called inside ``Dataset.map`` on batches."""
    return _images().batch(4).map(lambda x: layer(x, **call))


def _numbers() -> tf.data.Dataset:
    return tf.data.Dataset.range(8)


def _records(path) -> tf.data.Dataset:
    """A real TFRecord file of ``tf.train.Example``s, parsed."""
    file = str(path / "data.tfrecord")
    with tf.io.TFRecordWriter(file) as writer:
        for i in range(6):
            feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))
            example = tf.train.Example(
                features=tf.train.Features(feature={"i": feature})
            )
            writer.write(example.SerializeToString())
    spec = {"i": tf.io.FixedLenFeature([], tf.int64)}
    return tf.data.TFRecordDataset([file]).map(
        lambda record: tf.io.parse_single_example(record, spec)["i"] * 2
    )


@tf.function
def _count_to(i):
    # AutoGraph: a While whose body is a function of its own.
    total = tf.constant(0, tf.int64)
    for j in tf.range(i):
        total += j
    return tf.cond(total > 5, lambda: -total, lambda: total)


def _unordered_options() -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = False
    return options


def _two_sources() -> list:
    return [tf.data.Dataset.range(4), tf.data.Dataset.range(10, 14)]


# Each pipeline with the judgment it must get: "same" (and two iterations
# agree), "differs" (and two iterations show it), or "unknown": it may well
# repeat, but nothing proves it, so no.
PIPELINES = {
    "batch": ("same", lambda p: _numbers().batch(2)),
    "shuffle kept": (
        "same",
        lambda p: _numbers().shuffle(8, seed=1, reshuffle_each_iteration=False),
    ),
    "shuffle kept, unseeded": (
        "same",
        lambda p: _numbers().shuffle(8, reshuffle_each_iteration=False),
    ),
    "stateless op seeded": (
        "same",
        lambda p: _numbers().map(
            lambda i: tf.random.stateless_uniform([], seed=[1, i])
        ),
    ),
    "stateless image flip": (
        "same",
        lambda p: _images().map(
            lambda x: tf.image.stateless_random_flip_left_right(x, seed=[1, 2])
        ),
    ),
    "Rescaling, Resizing, CenterCrop": (
        "same",
        lambda p: (
            _images()
            .batch(4)
            .map(keras.layers.Rescaling(1 / 255))
            .map(keras.layers.Resizing(6, 6))
            .map(keras.layers.CenterCrop(4, 4))
        ),
    ),
    "tf.function with a loop and a cond": ("same", lambda p: _numbers().map(_count_to)),
    "parallel map and batch, in order": (
        "same",
        lambda p: (
            _numbers()
            .map(lambda i: i * 2, num_parallel_calls=2)
            .batch(2, num_parallel_calls=2)
        ),
    ),
    "interleave": (
        "same",
        lambda p: tf.data.Dataset.range(4).interleave(
            lambda i: tf.data.Dataset.range(i).map(lambda j: j * 2), cycle_length=2
        ),
    ),
    "flat_map of a parallel map, in order": (
        "same",
        lambda p: tf.data.Dataset.range(4).flat_map(
            lambda i: tf.data.Dataset.range(i).map(lambda j: j, num_parallel_calls=2)
        ),
    ),
    "flat_map of a parallel map, out of order": (
        "unknown",
        lambda p: tf.data.Dataset.range(4).flat_map(
            lambda i: tf.data.Dataset.range(i).map(
                lambda j: j, num_parallel_calls=2, deterministic=False
            )
        ),
    ),
    "cache": ("same", lambda p: _images().cache().batch(2)),
    "filter repeat take prefetch padded_batch unbatch shard": (
        "same",
        lambda p: (
            tf.data.Dataset.range(20)
            .filter(lambda x: x % 3 > 0)
            .repeat(2)
            .take(9)
            .prefetch(2)
            .padded_batch(2)
            .unbatch()
            .shard(2, 0)
        ),
    ),
    "zip and concatenate": (
        "same",
        lambda p: tf.data.Dataset.zip((_numbers(), _numbers().map(lambda x: -x))),
    ),
    "scan": (
        "same",
        lambda p: _numbers().scan(tf.constant(0, tf.int64), lambda s, x: (s + x, s)),
    ),
    "sample_from_datasets seeded": (
        "same",
        lambda p: tf.data.Dataset.sample_from_datasets(_two_sources(), seed=1),
    ),
    "TFRecord parsed": ("same", _records),
    "Dataset.random seeded": ("same", lambda p: tf.data.Dataset.random(seed=1).take(3)),
    "shuffle": ("differs", lambda p: _numbers().shuffle(8, seed=1)),
    "tf.random op in map": (
        "differs",
        lambda p: _numbers().map(lambda i: tf.random.uniform([])),
    ),
    "tf.image random op": (
        "differs",
        # Continuous values: two iterations cannot agree by chance (six
        # random flips did, one run in 64).
        lambda p: _images().map(lambda x: tf.image.random_brightness(x, 0.5)),
    ),
    "tf.random.Generator in map": (
        "differs",
        lambda p: (lambda g: _numbers().map(lambda i: g.uniform([])))(
            tf.random.Generator.from_seed(1)
        ),
    ),
    "RandomFlip in map": (
        "differs",
        lambda p: _in_map(keras.layers.RandomFlip(seed=1)),
    ),
    "RandomRotation in map": (
        "differs",
        lambda p: _in_map(keras.layers.RandomRotation(0.2, seed=1)),
    ),
    "RandomZoom in map": (
        "differs",
        lambda p: _in_map(keras.layers.RandomZoom(0.3, seed=1)),
    ),
    "RandomContrast in map": (
        "differs",
        lambda p: _in_map(keras.layers.RandomContrast(0.5, seed=1)),
    ),
    "GaussianNoise in map": (
        "differs",
        lambda p: _in_map(keras.layers.GaussianNoise(0.1, seed=1), training=True),
    ),
    "interleave of a shuffle": (
        "unknown",  # a shuffle inside a function: no seed it takes is vouched for
        lambda p: tf.data.Dataset.range(2).interleave(
            lambda i: tf.data.Dataset.range(3).shuffle(3, seed=1)
        ),
    ),
    "Dataset.random rerandomized": (
        "differs",
        lambda p: tf.data.Dataset.random(seed=1, rerandomize_each_iteration=True).take(
            3
        ),
    ),
    "Dataset.random unseeded": ("differs", lambda p: tf.data.Dataset.random().take(3)),
    "sample_from_datasets rerandomized": (
        "differs",
        lambda p: tf.data.Dataset.sample_from_datasets(
            _two_sources(), seed=1, rerandomize_each_iteration=True
        ),
    ),
    "py_function": ("unknown", lambda p: _numbers().map(_reads_python)),
    "numpy_function": (
        "unknown",
        lambda p: _numbers().map(
            lambda i: tf.numpy_function(lambda v: v, [i], tf.int64)
        ),
    ),
    "from_generator": (
        "unknown",
        lambda p: tf.data.Dataset.from_generator(
            lambda: iter(range(3)), output_types=tf.int64
        ),
    ),
    "a variable read in map": (
        "unknown",
        lambda p: (lambda v: _numbers().map(lambda i: i + v))(
            tf.Variable(3, dtype=tf.int64)
        ),
    ),
    "parallel interleave": (
        "unknown",  # its ordering is not kept where it can be read back
        lambda p: tf.data.Dataset.range(3).interleave(
            lambda i: tf.data.Dataset.range(i), cycle_length=2, num_parallel_calls=2
        ),
    ),
    "parallel map, out of order": (
        "unknown",
        lambda p: _numbers().map(
            lambda i: i, num_parallel_calls=2, deterministic=False
        ),
    ),
    "options.deterministic False": (
        "unknown",
        lambda p: (
            _numbers()
            .map(lambda i: i, num_parallel_calls=2)
            .with_options(_unordered_options())
        ),
    ),
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_same_every_iteration_is_said_only_where_it_is_known(name, tmp_path):
    from colab_resume.data.graph import same_every_iteration

    # No global seed (other tests set one): with it, an unseeded op takes a
    # seed from it, and "differs" would not show.
    tf.random.set_seed(None)
    expected, make = PIPELINES[name]
    dataset = make(tmp_path)
    assert same_every_iteration(dataset) is (expected == "same")
    first = [np.asarray(v) for v in dataset.take(6)]
    again = [np.asarray(v) for v in dataset.take(6)]
    agree = all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    if expected == "same":  # where it says so, two iterations agree
        assert agree
    if expected == "differs":  # where it says no for randomness, it is there
        assert not agree


def test_validation_steps_or_an_ema_optimizer_get_one_fit_per_epoch(
    tmp_path, monkeypatch
):
    # Keras keeps the validation iterator, and puts EMA weights into the
    # model, once per fit call: where the calls split would show.
    counted = FitCalls(monkeypatch)
    validation = tf.data.Dataset.from_tensor_slices((X, Y)).batch(16).repeat()
    train(tmp_path / "steps", epochs=3, validation_data=validation, validation_steps=2)
    assert counted.spans == [(0, 1), (1, 2), (2, 3)]

    counted.spans.clear()

    def build_ema() -> keras.Model:
        model = build_model()
        model.compile(optimizer=keras.optimizers.Adam(0.05, use_ema=True), loss="mse")
        return model

    keras.utils.set_random_seed(3)
    agent = cr.Agent(str(tmp_path / "ema"), save_every_steps=5, prefer="cpu")
    agent.fit(build_ema, make_dataset, epochs=3, steps_per_epoch=STEPS, verbose=0)
    agent.close()
    assert counted.spans == [(0, 1), (1, 2), (2, 3)]


def test_epochs_whose_batches_differ_in_structure_train_one_by_one(
    tmp_path, monkeypatch
):
    # Epoch 1 adds sample weights: it cannot be concatenated with epoch 2,
    # so each trains alone and none is skipped.
    counted = FitCalls(monkeypatch)

    def weighted_on_odd_epochs(epoch):
        ds = make_dataset(epoch)
        if epoch % 2:
            ds = ds.map(lambda x, y: (x, y, tf.ones_like(y[:, 0])))
        return ds

    _, history, calls = train(tmp_path / "run", data=weighted_on_odd_epochs, epochs=3)
    assert counted.spans == [(0, 1), (1, 2), (2, 3)]
    assert history.epoch == [0, 1, 2]
    assert [c[1] for c in calls if c[0] == "epoch_begin"] == [0, 1, 2]
