"""Access tokens that expire mid-run, and credentials that must never leak.

The proxy plays a token-checking server (see ``support.fake_credentials``): it
answers real HTTP 401 "Invalid Credentials" to a token older than one
second, while the client believes each token lasts an hour. Training must
ride through by refreshing and retrying, with no failed save — and no
token may appear in any object written, any event or any log line.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from support.fake_credentials import ExpiringCredentials, token_check

from colab_resume.storage import Storage

tf = pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow")
import keras  # noqa: E402
from support.toy import tiny_model as build_model  # noqa: E402

import colab_resume as cr  # noqa: E402

X = np.random.RandomState(1).randn(256, 4).astype("float32")
Y = X.sum(axis=1, keepdims=True)


def make_dataset(epoch: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(8)


class Slow(keras.callbacks.Callback):
    """Makes each step take a while, so tokens expire during training."""

    def on_train_batch_end(self, batch, logs=None):
        import time

        time.sleep(0.05)


def test_expiring_tokens_are_refreshed_and_never_leak(
    gcs_run_dir, gcs_options, fault_proxy, caplog
):
    credentials = ExpiringCredentials()
    fault_proxy.require_tokens(token_check(lifetime=1.0))
    caplog.set_level(logging.DEBUG)
    agent = cr.Agent(
        gcs_run_dir,
        save_every_steps=8,
        save_every_seconds=None,
        heartbeat_seconds=0.3,
        storage_options={"token": credentials, "endpoint_url": fault_proxy.url},
        prefer="cpu",
    )
    agent.fit(
        build_model,
        make_dataset,
        epochs=3,
        steps_per_epoch=32,
        callbacks=[Slow()],
        verbose=0,
    )
    fault_proxy.require_tokens(None)

    # Real 401s happened, each answered by a refresh; nothing failed.
    assert fault_proxy.counts["unauthorized"] >= 2, fault_proxy.counts
    assert credentials.refreshes >= 3
    retries = agent.events.recent(kind="storage.retry")
    assert any(
        "401" in e.message or "Invalid Credentials" in e.message for e in retries
    )
    assert not agent.events.recent(kind="checkpoint.failed")
    # No heartbeat failed for want of a valid token. (A heartbeat's 2 s
    # budget can still run out on a loaded machine: that is load, not
    # credentials, and other tests own it.)
    auth_words = ("401", "Invalid Credentials", "Unauthorized", "credential")
    assert not [
        e.message
        for e in agent.events.recent(kind="heartbeat.failed")
        if e.level == "error" and any(w in e.message for w in auth_words)
    ]
    assert agent.status().state == "COMPLETED"

    # No token anywhere: every object of the run, every event, every log line.
    secrets = [t for t in credentials.issued if t]
    assert secrets
    direct = Storage(gcs_run_dir, gcs_options)
    objects = direct.list()
    assert len(objects) > 5
    for info in objects:
        blob = direct.read_bytes(info.path)
        for token in secrets:
            assert token.encode() not in blob, info.path
    texts = [str(e.to_json()) for e in agent.events.recent()]
    texts += [record.getMessage() for record in caplog.records]
    texts.append(repr(agent._storage.principal))  # internal: who the storage is
    for text in texts:
        for token in secrets:
            assert token not in text
        assert "Bearer" not in text
