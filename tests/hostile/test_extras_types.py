"""Every extras entry the agent reads back is checked when the manifest is parsed.

A ``callbacks`` or ``grain`` entry of the wrong shape in a checkpoint's
extras restored as valid, and the run then died on a raw ``TypeError``
and ended FAILED. Now each agent entry (``callbacks``, ``metric_state``,
``grain``, ``fingerprints``, ``global_batch``, ``history``,
``steps_per_epoch``, ``runtime``) is checked against the types the agent
writes: a wrong one makes the checkpoint damaged, restore falls back to
the next older one and names it, and the callback and data code never
receives a value it did not write.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from support.hostile import checkpoint_manager as manager
from support.toy import tiny_fit_parts

from colab_resume.events import EventLog
from colab_resume.protocol import extras as agent_extras
from colab_resume.protocol.rundir import CheckpointName
from colab_resume.storage import Storage


def state(value: float) -> dict:
    return {"w": tf.Variable(np.full((4, 2), value, dtype="float32"))}


def two_checkpoints(storage, tmp_path) -> str:
    """Steps 1 (w = 1) and 2 (w = 2); returns the path of step 2's manifest."""
    mgr = manager(storage, tmp_path)
    for step in (1, 2):
        mgr.save(state(float(step)), step=step, epoch=0)
        mgr.wait()
        mgr.check()
    mgr.close()
    return CheckpointName(2, 1).manifest_path


def plant_extras(storage, path: str, extras: dict) -> None:
    manifest = storage.read_json(path)
    manifest["extras"] = {**manifest.get("extras", {}), **extras}
    storage.write_bytes(path, json.dumps(manifest).encode())


ES = {"wait": 0, "stopped_epoch": 0, "best": "inf", "best_epoch": 0,
      "has_best_weights": False}  # fmt: skip
WRONG = {
    "callbacks is not a list": {"callbacks": {"0": None}},
    "a callback record is a string": {"callbacks": ["EarlyStopping"]},
    "a record without its state": {"callbacks": [{"class": "EarlyStopping"}]},
    "a built-in's state of the wrong type": {
        "callbacks": [{"class": "EarlyStopping", "state": {**ES, "wait": "3"}}]
    },
    "a built-in's state lacks a field": {
        "callbacks": [
            {
                "class": "MyStopper",
                "kept_by": "EarlyStopping",
                "state": {k: v for k, v in ES.items() if k != "best_epoch"},
            }
        ]
    },  # fmt: skip
    "a best that is no number": {
        "callbacks": [
            {
                "class": "ReduceLROnPlateau",
                "kept_by": "ReduceLROnPlateau",
                "state": {"wait": 0, "best": "low", "cooldown_counter": 0},
            }
        ]
    },  # fmt: skip
    "a protocol's state that is no object": {
        "callbacks": [{"class": "Mine", "kept_by": "protocol", "state": [1, 2]}]
    },
    "CSVLogger keys of numbers": {
        "callbacks": [{"class": "CSVLogger", "state": {"size": 3, "keys": [1]}}]
    },
    "metric_state is an object": {"metric_state": {"loss": 1.0}},
    "a metric dtype that is no dtype": {
        "metric_state": [["loss/total", "float32; rm -rf", 1.0]]
    },
    "ragged metric values": {"metric_state": [["m/v", "float32", [[1.0], [1.0, 2]]]]},
    "metric values of text": {"metric_state": [["m/v", "float32", "1.0"]]},
    "grain is a list": {"grain": [0, 3]},
    "grain without its batch": {"grain": {"epoch": 0, "pipeline": "x"}},
    "grain with a negative epoch": {"grain": {"epoch": -1, "batch": 3}},
    "a grain pipeline that is a number": {
        "grain": {"epoch": 0, "batch": 3, "pipeline": 7}
    },
    "grain processes empty": {"grain": {"epoch": 0, "batch": 3, "processes": []}},
    "grain state bytes not text": {
        "grain": {"epoch": 0, "batch": 3, "pipeline": "p", "state": {"bytes": 5}}
    },
    "global_batch as text": {"global_batch": "32"},
    "steps_per_epoch zero": {"steps_per_epoch": 0},
    "runtime replicas as text": {"runtime": {"backend": "jax", "replicas": "8"}},
    "fingerprints with an epoch that is no number": {"fingerprints": {"one": "ab"}},
}


@pytest.mark.parametrize("extras", list(WRONG.values()), ids=list(WRONG))
def test_an_agent_entry_of_the_wrong_shape_is_damage_and_restore_falls_back(
    extras, gcs_run_dir, gcs_options, tmp_path
):
    storage = Storage(gcs_run_dir, gcs_options)
    plant_extras(storage, two_checkpoints(storage, tmp_path), extras)
    events = EventLog()
    fresh = state(0.0)
    info = manager(storage, tmp_path, events).restore(fresh)
    assert (info.step, float(fresh["w"].numpy()[0, 0])) == (1, 1.0)
    [damaged] = events.recent(kind="checkpoint.damaged")
    [key] = extras
    assert f"extras[{key!r}]" in damaged.message
    assert "step-000000002" in damaged.message


RIGHT = {
    "what the agent writes": {
        "callbacks": [
            None,
            {"class": "EarlyStopping", "kept_by": "EarlyStopping", "state": ES},
            {"class": "Mine", "kept_by": "protocol", "state": {"any": ["json"]}},
            {
                "class": "CSVLogger",
                "kept_by": "CSVLogger",
                "state": {"size": 0, "keys": None, "content": ""},
            },
        ],
        "metric_state": [["m/total", "float32", 2.5], ["m/count", "int64", [[1, 2]]]],
        "grain": {
            "epoch": 1,
            "batch": 3,
            "processes": [
                {"pipeline": "Batch < Source", "state": {"bytes": "{}"}},
                {"pipeline": "Batch < Source", "state": {"next_index": 9}},
            ],
        },
        "global_batch": None,
        "steps_per_epoch": 8,
        "runtime": {
            "backend": "tensorflow",
            "processes": 1,
            "kind": "cpu",
            "chip": None,
            "replicas": 1,
            "precision": "float32",
        },
    },  # fmt: skip
    "an older version's records (no keeper named)": {
        "callbacks": [
            {"class": "TensorBoard", "state": {"train_batch": 4, "test_batch": 0}}
        ],
    },  # fmt: skip
    "a newer writer's fields": {
        "grain": {"epoch": 0, "batch": 0, "pipeline": "p", "next_batch": "ab12"},
        "callbacks": [{"class": "EarlyStopping", "state": {**ES, "extra": 1}}],
    },
}


@pytest.mark.parametrize("extras", list(RIGHT.values()), ids=list(RIGHT))
def test_what_the_agent_writes_passes(extras):
    agent_extras.check(extras)


def test_a_fit_whose_newest_checkpoint_has_wrong_callbacks_resumes_from_the_one_before(
    tmp_path,
):
    """A real ``fit`` with EarlyStopping, its newest checkpoint's
    ``callbacks`` planted with the wrong shape: the next ``fit`` falls back
    to the checkpoint before, names the damaged one, and completes."""
    import keras

    import colab_resume as cr

    run_dir = str(tmp_path / "run")
    build_model, data = tiny_fit_parts()  # a Dense(1), 8 batches an epoch

    def make_dataset(epoch: int):
        return data

    def fit(epochs: int) -> cr.Agent:
        agent = cr.Agent(run_dir, prefer="cpu", save_every_steps=2, keep=5)
        stopper = keras.callbacks.EarlyStopping(monitor="loss", patience=50)
        agent.fit(
            build_model, make_dataset, epochs=epochs, steps_per_epoch=4,
            callbacks=[stopper], verbose=0,
        )  # fmt: skip
        return agent

    fit(epochs=1)
    storage = Storage(run_dir)
    manifests = [o.path for o in storage.list("checkpoints/")]
    names = [CheckpointName.parse(p.split("/")[1]) for p in manifests
             if p.endswith("/MANIFEST.json")]  # fmt: skip
    newest = max((n for n in names if n is not None), key=lambda n: n.step)
    assert newest.step == 4
    plant_extras(
        storage,
        newest.manifest_path,
        {"callbacks": [{"class": "EarlyStopping", "state": {**ES, "wait": [3]}}]},
    )

    agent = fit(epochs=2)
    [damaged] = agent.events.recent(kind="checkpoint.damaged")
    assert "extras['callbacks']" in damaged.message
    assert f"step-{newest.step:09d}" in damaged.message
    assert agent.progress().step == 8
    assert agent.status().state == "COMPLETED"
