"""The keras-hub preset a fine-tune was loaded from, named by its checkpoints.

Tiny BERT backbones are built from config and written as real presets with
``save_to_preset`` (never a download): into local directories, and into a
Hugging Face cache read offline, where ``from_preset("hf://me/tiny-a")``
loads them as it would a published preset. A build loads one with keras-hub's
own ``from_preset`` while the agent watches (:mod:`colab_resume.checkpoint.
presets`); checkpoints (``frozen="rebuild"`` and ``"once"``) record the
handle beside the frozen arrays' fingerprint, and a resume whose build
loaded another base is refused naming both presets.
"""

from __future__ import annotations

import json
import os
import shutil

import keras
import numpy as np
import pytest

import colab_resume as cr
from colab_resume.checkpoint import (
    CheckpointManager,
    FrozenArraysChangedError,
    presets,
)
from colab_resume.events import EventLog
from colab_resume.protocol.objects import SharedObjects
from colab_resume.storage import Storage

keras_hub = pytest.importorskip(
    "keras_hub", reason="keras-hub is a test dependency (make test)"
)


def tiny_backbone(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras_hub.models.BertBackbone(
        vocabulary_size=16,
        num_layers=1,
        num_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=8,
    )


def write_preset(directory, seed: int = 1) -> str:
    """A preset of a tiny BERT backbone, written as keras-hub writes one."""
    tiny_backbone(seed).save_to_preset(str(directory))
    return os.path.abspath(directory)


def build_model(preset: str | None, seed: int = 1) -> keras.Model:
    """A LoRA fine-tune of the backbone loaded from ``preset`` (or built
    from config, with ``seed``), as a user writes it."""
    backbone = (
        keras_hub.models.Backbone.from_preset(preset) if preset else tiny_backbone(seed)
    )
    backbone.enable_lora(2)
    model = keras_hub.models.BertTextClassifier(
        backbone=backbone, preprocessor=None, num_classes=2
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def fine_tune(preset: str | None, seed: int = 1) -> keras.Model:
    """:func:`build_model` as the agent runs it: the presets it loads noted
    with the model."""
    with presets.watching() as loaded:
        model = build_model(preset, seed)
    presets.mark(model, loaded)
    return model


def batches(epoch: int):
    rng = np.random.default_rng(epoch)
    for _ in range(2):
        tokens = rng.integers(1, 16, (2, 8)).astype("int32")
        x = {
            "token_ids": tokens,
            "segment_ids": np.zeros_like(tokens),
            "padding_mask": np.ones_like(tokens),
        }
        yield x, rng.integers(0, 2, (2,)).astype("int32")


def manager(run_dir, tmp_path, **options) -> CheckpointManager:
    return CheckpointManager(
        Storage(str(run_dir)),
        lease=1,
        fence=lambda: None,
        events=EventLog(),
        staging_dir=str(tmp_path / "staging"),
        **options,
    )


def saved(run_dir, tmp_path, model, frozen: str) -> dict:
    """Save ``model`` once; its manifest."""
    with manager(run_dir, tmp_path, frozen=frozen) as saving:
        saving.save(model, step=1, epoch=0)
    return Storage(str(run_dir)).read_json(
        "checkpoints/step-000000001.e00000001/MANIFEST.json"
    )


def test_a_build_notes_the_preset_it_loads_and_none_when_built_from_config(
    tmp_path,
):
    from keras_hub.src.utils import preset_utils

    original = preset_utils.PresetLoader.__init__
    a = write_preset(tmp_path / "a")
    assert presets.loaded(fine_tune(a)) == (a,)
    assert presets.loaded(fine_tune(None)) == ()
    with pytest.raises(ValueError), presets.watching():
        keras_hub.models.Backbone.from_preset(str(tmp_path / "none"))
    assert preset_utils.PresetLoader.__init__ is original  # the watch is undone
    # A built-in name is the versioned Kaggle handle it downloads from.
    builtin = presets.handle("bert_tiny_en_uncased", preset_utils.BUILTIN_PRESETS)
    assert builtin.startswith("kaggle://keras/bert/keras/bert_tiny_en_uncased/")
    assert presets.names_contents(builtin) and presets.names_contents("hf://me/x")
    assert not presets.names_contents(a)


def test_rebuild_names_the_preset_and_a_directory_s_arrays_decide(tmp_path):
    """A directory names only a place: the same preset copied elsewhere
    resumes, another base written in a directory is refused naming both."""
    a = write_preset(tmp_path / "a")
    copied = str(shutil.copytree(a, tmp_path / "copied"))
    other = write_preset(tmp_path / "other", seed=2)
    run = tmp_path / "run"
    model = fine_tune(a)
    manifest = saved(run, tmp_path, model, "rebuild")
    assert manifest["objects"]["presets"] == [a]
    assert manifest["objects"]["rebuilt"]

    with manager(run, tmp_path, frozen="rebuild") as reading:
        assert reading.restore(fine_tune(copied)).step == 1
        # Built from config with the preset's seed: no handle, the same arrays.
        assert reading.restore(fine_tune(None, seed=1)).step == 1
        with pytest.raises(FrozenArraysChangedError) as caught:
            reading.restore(fine_tune(other))
    refusal = caught.value
    assert f"(trained on preset {a}, build_model() loaded {other})" in str(refusal)
    assert f"Make build_model() load {a} again" in str(refusal)
    assert refusal.differ and (refusal.trained_on, refusal.loaded) == ((a,), (other,))
    assert isinstance(refusal, cr.ColabResumeError)

    shutil.rmtree(a)
    write_preset(a, seed=2)  # another base written over the directory
    with manager(run, tmp_path, frozen="rebuild") as reading:
        with pytest.raises(FrozenArraysChangedError) as caught:
            reading.restore(fine_tune(a))
    assert f"(both loaded from preset {a}, whose contents changed since)" in str(
        caught.value
    )


def test_once_records_the_preset_and_an_older_manifest_without_one_restores(
    tmp_path,
):
    a = write_preset(tmp_path / "a")
    other = write_preset(tmp_path / "other", seed=2)
    once = saved(tmp_path / "once", tmp_path, fine_tune(a), "once")
    assert once["objects"]["presets"] == [a] and once["objects"]["arrays"]

    # A manifest written before presets were recorded: the arrays decide,
    # and the refusal names no preset.
    run = tmp_path / "older"
    saved(run, tmp_path, fine_tune(a), "rebuild")
    path = run / "checkpoints" / "step-000000001.e00000001" / "MANIFEST.json"
    record = json.loads(path.read_text())
    del record["objects"]["presets"]
    path.write_text(json.dumps(record))
    with manager(run, tmp_path, frozen="rebuild") as reading:
        assert reading.restore(fine_tune(a)).step == 1
        with pytest.raises(FrozenArraysChangedError) as caught:
            reading.restore(fine_tune(other))
    assert "trained on preset" not in str(caught.value)
    assert "Make build_model() load the same base" in str(caught.value)

    with pytest.raises(ValueError, match="presets must be a list"):
        SharedObjects.from_json({"files": [], "arrays": {}, "presets": "hf://x/y"})


@pytest.fixture
def hub(tmp_path, monkeypatch) -> dict[str, str]:
    """Two Hugging Face repos in an offline cache, holding the same preset:
    handle -> its snapshot."""
    import huggingface_hub.constants

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    preset = write_preset(tmp_path / "preset")
    revision = "0123456789abcdef0123456789abcdef01234567"
    repos = {}
    for name in ("tiny-a", "tiny-b"):
        repo = cache / f"models--me--{name}"
        shutil.copytree(preset, repo / "snapshots" / revision)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
        repos[f"hf://me/{name}"] = str(repo / "snapshots" / revision)
    return repos


def test_another_hub_preset_is_refused_by_name_before_any_array_is_compared(
    hub, tmp_path
):
    """Through the agent: the same arrays under another hub's handle are
    refused on the handles alone (no array compared), both when the run is
    extended and when its final state is loaded again."""
    run = str(tmp_path / "run")

    def fit(handle: str, epochs: int) -> cr.Agent:
        agent = cr.Agent(
            run, frozen="rebuild", save_every_steps=2, heartbeat_seconds=0.5
        )
        agent.fit(
            lambda: build_model(handle),
            batches,
            epochs=epochs,
            steps_per_epoch=2,
            verbose=0,
        )
        return agent

    fit("hf://me/tiny-a", epochs=1)
    manifest = Storage(run).read_json(
        "checkpoints/step-000000002.e00000001/MANIFEST.json"
    )
    assert manifest["objects"]["presets"] == ["hf://me/tiny-a"]
    for epochs in (1, 2):  # the final state loaded again; the run extended
        with pytest.raises(FrozenArraysChangedError) as caught:
            fit("hf://me/tiny-b", epochs=epochs)
        assert caught.value.differ == []
        assert "on preset hf://me/tiny-a, build_model() loaded hf://me/tiny-b" in str(
            caught.value
        )
        assert "Make build_model() load hf://me/tiny-a again" in str(caught.value)
    assert fit("hf://me/tiny-a", epochs=2).status().state == "COMPLETED"
