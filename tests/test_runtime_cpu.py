"""The CPU path with real TensorFlow, each scenario in a fresh process.

Logical devices and TensorFlow's device initialisation are process-wide,
so each script runs in its own interpreter (``sys.executable -c``) and
reports what it saw as one JSON line; the tests below check it. Two
processes in all, because importing TensorFlow costs seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = """
import json, os, sys, tempfile
import numpy as np
from colab_resume.events import EventLog
import colab_resume.runtime as rt
import colab_resume.backend.accelerator as accel

out = {}
here = tempfile.mkdtemp()  # an empty machine root: no TPU, no GPU files

def platform(**kw):
    return accel.Platform(env=kw.pop("env", {}), root=kw.pop("root", here),
                       module_available=lambda name: False, **kw)

def train_step(strategy):
    import keras
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    before = [w.copy() for w in model.get_weights()]
    x = np.arange(12, dtype="float32").reshape(4, 3) / 10
    history = model.fit(x, np.ones((4, 1), "float32"), batch_size=4, epochs=1,
                        verbose=0)
    changed = any((a != b).any() for a, b in zip(before, model.get_weights()))
    return {"loss": float(history.history["loss"][0]), "changed": bool(changed),
            "model": model, "x": x}

def error(fn):
    try:
        fn()
    except Exception as exc:
        return {"type": type(exc).__name__, "message": str(exc)}
    return None
"""

ONE_DEVICE = (
    PRELUDE
    + """
import keras
import tensorflow as tf

# 1. auto on a machine with nothing: CPU, with a warning saying why.
events = EventLog()
strategy = accel.connect(events=events, platform=platform())
conn = accel.current_connection()
out["strategy"] = type(strategy).__name__
out["connection"] = [conn.kind, conn.replicas, conn.precision]
out["policy"] = keras.mixed_precision.global_policy().name
out["warnings"] = [(e.kind, e.message) for e in events.recent() if e.level == "warning"]
first = train_step(strategy)
out["trained"] = [first["changed"], np.isfinite(first["loss"]).item()]

# 2. A loss raised inside a Keras callback is recognised.
class Lose(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        raise tf.errors.UnavailableError(None, None, "Socket closed")
try:
    first["model"].fit(first["x"], np.ones((4, 1)), batch_size=4, verbose=0,
                       callbacks=[Lose()])
    out["callback_loss"] = None
except Exception as exc:
    out["callback_loss"] = [type(exc).__name__, rt.is_accelerator_loss(exc)]

# 3. reconnect: a strategy that trains (on one device TensorFlow's default,
#    the same object again).
again = accel.reconnect()
out["reconnect"] = [type(again).__name__, train_step(again)["changed"]]

# 4. Real TensorFlow (CPU-only build) on an injected Colab TPU VM: the same
#    failure a plain `tensorflow` gives on a real Colab TPU, explained.
tpu_root = tempfile.mkdtemp()
os.makedirs(os.path.join(tpu_root, "dev", "vfio"))
open(os.path.join(tpu_root, "dev", "vfio", "0"), "w").close()
colab_tpu = {"COLAB_RELEASE_TAG": "x", "COLAB_TPU_1VM": "1",
             "TPU_ACCELERATOR_TYPE": "v5e-1", "TPU_WORKER_HOSTNAMES": "localhost"}
tpu_platform = platform(env=colab_tpu, root=tpu_root,
                        lock_path=os.path.join(tpu_root, "libtpu_lockfile"))
for prefer in ("tpu", "auto"):
    out["real_tpu_" + prefer] = error(
        lambda: accel.Accelerator(rt.ConnectOptions(prefer=prefer),
                               platform=tpu_platform).connect())

# 5. auto with a TPU that never answers (a mock: no TPU exists here) falls
#    back to the CPU at the deadline, with a warning.
class NeverAnswers:
    def cluster_resolver(self, tpu):
        raise tf.errors.UnavailableError(None, None, "failed to connect")
clock = [0.0]
def sleep(s):
    clock[0] += s
events = EventLog()
fallback = accel.Accelerator(
    rt.ConnectOptions(deadline_seconds=5.0), events=events,
    platform=platform(env=colab_tpu, root=tpu_root, tpu_api=NeverAnswers(),
                      sleep=sleep, clock=lambda: clock[0],
                      lock_path=os.path.join(tpu_root, "libtpu_lockfile")))
fallback.connect()
out["tpu_fallback"] = [fallback.connection.kind, fallback.connection.precision,
                       [e.message for e in events.recent(kind="runtime.fallback")]]

# 6. Explicit precision is set as Keras' global policy.
accel.Accelerator(rt.ConnectOptions(prefer="cpu", precision="mixed_bfloat16"),
               platform=platform()).connect()
out["explicit_policy"] = keras.mixed_precision.global_policy().name

# 7. Too late to split the CPU: TensorFlow's devices are initialised.
out["too_late"] = error(lambda: accel.connect(prefer="cpu", cpu_replicas=2,
                                           platform=platform()))

# 8. "auto" after 6: the policy a connect chose is not the user's; back to
#    float32. A policy the user set before connecting is kept, by a reconnect
#    (which resets Keras) and a later connect too; an explicit precision
#    replaces it, saying so.
def policy_messages(events):
    return [e.message for e in events.recent(kind="runtime.precision")]
accel.Accelerator(rt.ConnectOptions(prefer="cpu"), platform=platform()).connect()
out["after_explicit"] = keras.mixed_precision.global_policy().name
keras.mixed_precision.set_global_policy("mixed_bfloat16")
events = EventLog()
kept = accel.Accelerator(rt.ConnectOptions(prefer="cpu"), events=events,
                      platform=platform())
kept.connect()
out["user_policy"] = [kept.connection.precision,
                      keras.mixed_precision.global_policy().name,
                      policy_messages(events)]
kept.reconnect()
out["user_policy_reconnected"] = [kept.connection.precision,
                                  keras.mixed_precision.global_policy().name]
accel.Accelerator(rt.ConnectOptions(prefer="cpu"), platform=platform()).connect()
out["user_policy_later"] = keras.mixed_precision.global_policy().name
events = EventLog()
accel.Accelerator(rt.ConnectOptions(prefer="cpu", precision="float32"),
               events=events, platform=platform()).connect()
out["user_policy_replaced"] = [keras.mixed_precision.global_policy().name,
                               policy_messages(events)]
print("RESULT " + json.dumps(out))
"""
)

TWO_REPLICAS = (
    PRELUDE
    + """
strategy = accel.connect(prefer="cpu", cpu_replicas=2, platform=platform())
conn = accel.current_connection()
out["strategy"] = [type(strategy).__name__, strategy.num_replicas_in_sync]
out["connection"] = [conn.kind, conn.replicas, conn.label]
out["devices"] = list(strategy.extended.worker_devices)
out["trained"] = train_step(strategy)["changed"]
again = accel.reconnect()
out["reconnect"] = [again is not strategy, again.num_replicas_in_sync,
                    train_step(again)["changed"]]
# After initialisation: the same split is reused, another one refused.
same = accel.Accelerator(rt.ConnectOptions(prefer="cpu", cpu_replicas=2),
                      platform=platform()).connect()
out["same_split"] = same.num_replicas_in_sync
out["other_split"] = error(lambda: accel.Accelerator(
    rt.ConnectOptions(prefer="cpu", cpu_replicas=3), platform=platform()).connect())
print("RESULT " + json.dumps(out))
"""
)


def run_script(code: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.fixture(scope="module")
def one_device() -> dict:
    return run_script(ONE_DEVICE)


@pytest.fixture(scope="module")
def two_replicas() -> dict:
    return run_script(TWO_REPLICAS)


@pytest.mark.tf
def test_auto_falls_back_to_one_cpu_device_with_a_warning(one_device):
    # TensorFlow's default strategy: no distributed iterator on one device.
    assert one_device["strategy"] == "_DefaultDistributionStrategy"
    assert one_device["connection"] == ["cpu", 1, "float32"]
    assert one_device["policy"] == "float32"
    (kind, message), *_ = one_device["warnings"]
    assert kind == "runtime.fallback"
    assert "no TPU found" in message and "no GPU found" in message
    assert one_device["trained"] == [True, True]


@pytest.mark.tf
def test_loss_raised_in_a_keras_callback_is_recognised(one_device):
    assert one_device["callback_loss"] == ["UnavailableError", True]


@pytest.mark.tf
def test_reconnect_gives_a_fresh_working_strategy(one_device):
    assert one_device["reconnect"] == ["_DefaultDistributionStrategy", True]


@pytest.mark.tf
@pytest.mark.parametrize("prefer", ["tpu", "auto"])
def test_real_tensorflow_without_tpu_support_on_a_tpu_vm(one_device, prefer):
    failure = one_device["real_tpu_" + prefer]
    assert failure["type"] == "TPUSupportMissingError"
    assert (
        "No OpKernel was registered to support Op 'ConfigureDistributedTPU'"
        in (failure["message"])
    )
    assert "pip install tensorflow-tpu==" in failure["message"]


@pytest.mark.tf
def test_auto_falls_back_when_the_tpu_never_answers(one_device):
    kind, policy, warnings = one_device["tpu_fallback"]
    assert (kind, policy) == ("cpu", "float32")
    assert (
        len(warnings) == 1
        and "TPU failed: Could not connect to TPU 'local'" in (warnings[0])
    )


@pytest.mark.tf
def test_explicit_precision_sets_the_global_policy(one_device):
    assert one_device["explicit_policy"] == "mixed_bfloat16"


@pytest.mark.tf
def test_a_policy_a_connect_chose_does_not_outlive_it(one_device):
    assert one_device["after_explicit"] == "float32"


@pytest.mark.tf
def test_auto_keeps_the_policy_the_user_set_and_says_so(one_device):
    precision, policy, (message,) = one_device["user_policy"]
    assert precision == policy == "mixed_bfloat16"
    assert "precision='auto' keeps the global policy mixed_bfloat16" in message
    assert "precision='float32'" in message  # how to get auto's choice instead
    assert one_device["user_policy_reconnected"] == ["mixed_bfloat16"] * 2
    assert one_device["user_policy_later"] == "mixed_bfloat16"


@pytest.mark.tf
def test_an_explicit_precision_replaces_the_users_policy_and_says_so(one_device):
    policy, (message,) = one_device["user_policy_replaced"]
    assert policy == "float32"
    assert "precision='float32' replaces the global policy mixed_bfloat16" in message
    assert "precision='auto'" in message  # how to keep it


@pytest.mark.tf
def test_too_late_to_split_the_cpu(one_device):
    failure = one_device["too_late"]
    assert failure["type"] == "LogicalDevicesError"
    assert "cpu_replicas=2" in failure["message"]
    assert "before any TensorFlow op" in failure["message"]


@pytest.mark.tf
def test_two_logical_cpus_mirrored(two_replicas):
    assert two_replicas["strategy"] == ["MirroredStrategy", 2]
    assert two_replicas["connection"] == ["cpu", 2, "CPU x2 (float32)"]
    assert [d.rsplit("/", 1)[-1] for d in two_replicas["devices"]] == [
        "device:CPU:0",
        "device:CPU:1",
    ]
    assert two_replicas["trained"] is True


@pytest.mark.tf
def test_reconnect_keeps_two_replicas(two_replicas):
    assert two_replicas["reconnect"] == [True, 2, True]


@pytest.mark.tf
def test_existing_split_reused_other_refused(two_replicas):
    assert two_replicas["same_split"] == 2
    failure = two_replicas["other_split"]
    assert failure["type"] == "LogicalDevicesError"
    assert "cpu_replicas=3" in failure["message"] and "with 2" in failure["message"]
