"""Connecting to a TPU, retries, reconnect and the diagnostics, up to the resolver.

There is no TPU where these tests run, so the TPU calls go to
:class:`FakeTPUApi`, a mock of TensorFlow's resolver / initialize /
strategy calls; each test that uses it says so. Everything else is real:
TensorFlow's own error classes, a real process holding a real lock file,
TensorFlow's real CUDA-build flag. The real TensorFlow TPU path (which fails
on this CPU-only TensorFlow exactly like a plain ``tensorflow`` on a Colab
TPU) is exercised in ``test_runtime_cpu.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tensorflow as tf

from colab_resume.backend import accelerator as accelerator_module
from colab_resume.backend.accelerator import Accelerator, Platform, connect
from colab_resume.events import EventLog
from colab_resume.runtime import (
    AcceleratorNotFoundError,
    AcceleratorUnavailableError,
    ConnectOptionError,
    ConnectOptions,
    GPUSupportMissingError,
    TensorFlowNotInstalledError,
    TPUInUseError,
    TPUNameRequiredError,
    TPUSupportMissingError,
)
from colab_resume.runtime.diagnose import tpu_lock_holders

COLAB_TPU_VM_ENV = {
    "COLAB_RELEASE_TAG": "release-colab",
    "COLAB_TPU_1VM": "1",
    "TPU_ACCELERATOR_TYPE": "v5e-1",
    "TPU_WORKER_HOSTNAMES": "localhost",
}
LEGACY_NODE_ENV = {
    "COLAB_RELEASE_TAG": "release-colab",
    "COLAB_TPU_ADDR": "10.0.0.2:8470",
}
GCP_TPU_ENV = {"TPU_NAME": "my-tpu", "TPU_ACCELERATOR_TYPE": "v4-8"}

# What TensorFlow raises when the plain (non-TPU) package meets a TPU.
OPKERNEL_MESSAGE = (
    "TPUs not found in the cluster. Failed in initialization: No OpKernel was "
    "registered to support Op 'ConfigureDistributedTPU' used by {{node "
    "ConfigureDistributedTPU}} with these attrs: [is_global_init=false]\n"
    "Registered devices: [CPU]"
)


class FakeStrategy:
    def __init__(self, replicas: int):
        self.num_replicas_in_sync = replicas


class FakeResolver:
    def __init__(self, tpu: str):
        self.tpu = tpu


class FakeTPUApi:
    """A mock of TensorFlow's TPU calls (no TPU exists where tests run).

    Records every call; ``failures[method]`` lists exceptions that method
    raises on its next calls, in order.
    """

    def __init__(self, replicas: int = 8, **failures: list[BaseException]):
        self.replicas = replicas
        self.failures = {name: list(errs) for name, errs in failures.items()}
        self.calls: list[tuple[str, str]] = []

    def _call(self, name: str, tpu: str) -> None:
        self.calls.append((name, tpu))
        pending = self.failures.get(name)
        if pending:
            raise pending.pop(0)

    def cluster_resolver(self, tpu):
        if tpu in ("", None):
            # TPUClusterResolver's own check on a GCE-like machine.
            raise ValueError("Please provide a TPU Name to connect to.")
        self._call("resolver", tpu)
        return FakeResolver(tpu)

    def connect_to_cluster(self, resolver):
        self._call("connect_to_cluster", resolver.tpu)

    def initialize_tpu_system(self, resolver):
        self._call("initialize", resolver.tpu)

    def shutdown_tpu_system(self, resolver):
        self._call("shutdown", resolver.tpu)

    def tpu_strategy(self, resolver):
        self._call("strategy", resolver.tpu)
        return FakeStrategy(self.replicas)


class FakeTime:
    """A clock that only moves when slept on, so deadlines are instant."""

    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def world(tmp_path):
    """A fake TPU API and clock, recorded Keras globals, an empty machine root."""

    class World:
        api = FakeTPUApi()
        time = FakeTime()
        events = EventLog()
        policies: list[str] = []
        cleared: list[bool] = []
        lock_path = str(tmp_path / "libtpu_lockfile")

        def platform(self, env, **overrides):
            fields = dict(
                env=env,
                root=str(tmp_path),
                module_available=lambda name: False,
                tpu_api=self.api,
                set_precision=self.policies.append,
                user_precision=lambda: None,
                clear_session=lambda: self.cleared.append(True),
                sleep=self.time.sleep,
                clock=self.time.clock,
                lock_path=self.lock_path,
            )
            fields.update(overrides)
            return Platform(**fields)

        def accelerator(self, env, **options):
            return Accelerator(
                ConnectOptions(prefer="tpu", **options),
                events=self.events,
                platform=self.platform(env),
            )

        def kinds(self, level=None):
            return [
                e.kind
                for e in self.events.recent()
                if level is None or e.level == level
            ]

    yield World()
    accelerator_module._current = None  # forget the process-wide connection


def test_colab_tpu_vm_resolves_local_and_skips_cluster_connect(world):
    """Mock TPU (none exists here): Colab TPU VM -> "local", no connect_to_cluster."""
    acc = world.accelerator(COLAB_TPU_VM_ENV)
    strategy = acc.connect()
    assert world.api.calls == [
        ("resolver", "local"),
        ("initialize", "local"),
        ("strategy", "local"),
    ]
    assert strategy.num_replicas_in_sync == 8
    conn = acc.connection
    assert (conn.kind, conn.replicas, conn.chip_type) == ("tpu", 8, "v5e-1")
    assert conn.precision == "mixed_bfloat16" and world.policies == ["mixed_bfloat16"]
    assert conn.tpu_target == "local" and conn.io_device is None
    assert conn.label == "TPU v5e-1 x8 (mixed_bfloat16)"
    assert world.kinds() == [
        "runtime.detected",
        "runtime.tpu.attempt",
        "runtime.precision",
        "runtime.connected",
        "runtime.strategy",
    ]
    (note,) = [e.message for e in world.events.recent(kind="runtime.precision")]
    assert "set Keras' global policy to mixed_bfloat16 on the TPU" in note
    assert "pass precision='float32' to keep float32" in note
    assert acc.connect() is strategy  # idempotent: no second initialisation
    assert len(world.api.calls) == 3


def test_auto_keeps_a_users_policy_on_the_tpu_too(world):
    """Mock TPU (none exists here): the user's float16 policy beats bfloat16."""
    acc = Accelerator(
        ConnectOptions(prefer="tpu"),
        events=world.events,
        platform=world.platform(
            COLAB_TPU_VM_ENV,
            user_precision=lambda: "mixed_float16",
            keep_precision=world.policies.append,
        ),
    )
    acc.connect()
    acc.reconnect()
    assert acc.connection.precision == "mixed_float16"
    assert world.policies == ["mixed_float16", "mixed_float16"]
    (note,) = [e.message for e in world.events.recent(kind="runtime.precision")]
    assert "keeps the global policy mixed_float16" in note
    assert "pass precision='mixed_bfloat16' for what 'auto' picks on the TPU" in note


def test_legacy_node_connects_to_the_cluster_first(world):
    """Mock TPU (none exists here): legacy node -> grpc:// target, connect first."""
    acc = world.accelerator(LEGACY_NODE_ENV)
    acc.connect()
    assert world.api.calls == [
        ("resolver", "grpc://10.0.0.2:8470"),
        ("connect_to_cluster", "grpc://10.0.0.2:8470"),
        ("initialize", "grpc://10.0.0.2:8470"),
        ("strategy", "grpc://10.0.0.2:8470"),
    ]
    # Checkpoints of a remote worker must be written by the local host.
    assert acc.connection.io_device == "/job:localhost"


def test_gcp_named_tpu_uses_tpu_name(world):
    """Mock TPU (none exists here): TPU_NAME on GCP names the resolver's TPU.

    A named TPU is resolved to its workers' addresses and TensorFlow places
    the TPU initialisation on that remote job, so it is connected first.
    """
    world.accelerator(GCP_TPU_ENV).connect()
    assert world.api.calls[:2] == [
        ("resolver", "my-tpu"),
        ("connect_to_cluster", "my-tpu"),
    ]


def test_tpu_argument_overrides_detection(world):
    """Mock TPU (none exists here): tpu="local" wins over TPU_NAME."""
    world.accelerator(GCP_TPU_ENV, tpu="local").connect()
    assert [c[0] for c in world.api.calls] == ["resolver", "initialize", "strategy"]
    assert world.api.calls[0] == ("resolver", "local")


def test_retries_unavailable_with_events(world):
    """Mock TPU (none exists here): UnavailableError is retried with backoff."""
    world.api.failures["initialize"] = [
        tf.errors.UnavailableError(None, None, "Socket closed"),
        tf.errors.DeadlineExceededError(None, None, "deadline exceeded"),
    ]
    acc = world.accelerator(
        COLAB_TPU_VM_ENV, initial_backoff_seconds=1.0, max_backoff_seconds=30.0
    )
    acc.connect()
    assert [c[0] for c in world.api.calls].count("resolver") == 3  # fresh resolver each
    retries = world.events.recent(kind="runtime.tpu.retry")
    assert [e.level for e in retries] == ["warning", "warning"]
    assert "UnavailableError: Socket closed" in retries[0].message
    assert [
        e.data["attempt"] for e in world.events.recent(kind="runtime.tpu.attempt")
    ] == [
        1,
        2,
        3,
    ]
    # Exponential backoff with jitter: about 1 s, then about 2 s.
    assert len(world.time.sleeps) == 2
    assert 1.0 <= world.time.sleeps[0] <= 2.0 and 2.0 <= world.time.sleeps[1] <= 3.0
    assert acc.connection.kind == "tpu"


def test_deadline_is_respected(world):
    """Mock TPU (none exists here): a TPU that never answers fails at the deadline."""
    world.api.failures["initialize"] = [
        tf.errors.UnavailableError(None, None, "failed to connect to all addresses")
        for _ in range(100)
    ]
    acc = world.accelerator(
        COLAB_TPU_VM_ENV,
        deadline_seconds=20.0,
        initial_backoff_seconds=1.0,
        max_backoff_seconds=4.0,
    )
    with pytest.raises(AcceleratorUnavailableError) as raised:
        acc.connect()
    assert world.time.now == pytest.approx(20.0)  # last sleep cut to the deadline
    assert max(world.time.sleeps) <= 4.0 + 1.0  # max backoff plus jitter
    attempts = len(world.events.recent(kind="runtime.tpu.attempt"))
    assert attempts == len(world.time.sleeps) + 1 > 3
    message = str(raised.value)
    assert "deadline 20s" in message and "UnavailableError" in message
    assert isinstance(raised.value.__cause__, tf.errors.UnavailableError)


def test_max_attempts(world):
    """Mock TPU (none exists here): max_attempts caps the attempts."""
    world.api.failures["initialize"] = [
        tf.errors.UnavailableError(None, None, "x") for _ in range(10)
    ]
    with pytest.raises(AcceleratorUnavailableError):
        world.accelerator(COLAB_TPU_VM_ENV, max_attempts=3).connect()
    assert len(world.events.recent(kind="runtime.tpu.attempt")) == 3


def test_unknown_error_is_not_retried(world):
    """Mock TPU (none exists here): an unknown permanent error surfaces at once."""
    world.api.failures["initialize"] = [RuntimeError("something else entirely")]
    with pytest.raises(RuntimeError, match="something else entirely"):
        world.accelerator(COLAB_TPU_VM_ENV).connect()
    assert world.time.sleeps == []


def test_opkernel_message_names_the_install_command(world):
    """Mock TPU (none exists here): the plain-tensorflow-on-TPU error is explained."""
    cause = tf.errors.InvalidArgumentError(None, None, OPKERNEL_MESSAGE)
    world.api.failures["initialize"] = [
        tf.errors.NotFoundError(None, None, OPKERNEL_MESSAGE)
    ]
    world.api.failures["initialize"][0].__context__ = cause
    with pytest.raises(TPUSupportMissingError) as raised:
        world.accelerator(COLAB_TPU_VM_ENV).connect()
    message = str(raised.value)
    assert "ConfigureDistributedTPU" in message
    assert (
        f"pip install tensorflow-tpu=={tf.__version__} --find-links="
        "https://storage.googleapis.com/libtpu-tf-releases/index.html"
    ) in message
    assert "Restart session" in message and "COLAB_TPU_1VM=1" in message
    assert world.time.sleeps == []  # a missing package is not retried


def test_please_provide_a_tpu_name(world):
    """Mock TPU (none exists here): the resolver's "Please provide a TPU Name"."""
    with pytest.raises(TPUNameRequiredError) as raised:
        world.accelerator(GCP_TPU_ENV, tpu="").connect()
    message = str(raised.value)
    assert "Please provide a TPU Name" in message and 'tpu="local"' in message
    assert isinstance(raised.value, ValueError)


LOCK_HOLDER = """
import fcntl, sys, time
f = open(sys.argv[1], "a+")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as libtpu does
print("READY", flush=True)
time.sleep(120)
"""


@pytest.fixture
def lock_holder(world):
    """A real other process holding libtpu's lock file (a temp file here)."""
    child = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, world.lock_path, "tpu-hog-marker"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "READY"
        yield child
    finally:
        child.kill()
        child.wait()


def test_tpu_held_by_another_process_names_it(world, lock_holder):
    """Mock TPU (none exists here); the lock holder is a real process."""
    with pytest.raises(TPUInUseError) as raised:
        world.accelerator(COLAB_TPU_VM_ENV).connect()
    assert raised.value.pids == (lock_holder.pid,)
    message = str(raised.value)
    assert f"pid {lock_holder.pid}" in message and "tpu-hog-marker" in message
    assert f"kill {lock_holder.pid}" in message and world.lock_path in message
    assert world.api.calls == []  # refused before TensorFlow touched the TPU


def test_lock_holders_ignores_this_process(world, lock_holder):
    with open(world.lock_path) as mine:  # this process has it open too
        assert mine.readable()
        assert tpu_lock_holders(world.lock_path) == (lock_holder.pid,)
    assert tpu_lock_holders(world.lock_path, exclude=(lock_holder.pid,)) == ()
    assert tpu_lock_holders(str(os.path.dirname(world.lock_path)) + "/absent") == ()


def test_no_tpu_found_while_another_process_holds_it(world, lock_holder):
    """Mock TPU (none exists here): "no TPU" with a live holder means "in use".

    The holder appears only after the pre-check, as when a script starts
    while the notebook kernel is still importing TensorFlow.
    """
    acc = world.accelerator(COLAB_TPU_VM_ENV)
    acc.connector._resolver = object()  # skip the pre-check, as on reconnect
    world.api.failures["initialize"] = [
        tf.errors.NotFoundError(None, None, OPKERNEL_MESSAGE)
    ]
    with pytest.raises(TPUInUseError) as raised:
        acc.connect()
    assert raised.value.pids == (lock_holder.pid,)


def test_in_use_message_without_visible_holder(world):
    """Mock TPU (none exists here): libtpu's own message, holder not visible."""
    world.api.failures["initialize"] = [
        tf.errors.AbortedError(
            None, None, "The TPU is already in use by process with pid 4242."
        )
    ]
    with pytest.raises(TPUInUseError) as raised:
        world.accelerator(COLAB_TPU_VM_ENV).connect()
    assert raised.value.pids == (4242,)
    assert "pid 4242" in str(raised.value) and world.time.sleeps == []


def test_reconnect_shuts_down_and_initialises_again(world):
    """Mock TPU (none exists here): reconnect = shutdown, clear, init, new strategy."""
    acc = world.accelerator(COLAB_TPU_VM_ENV)
    first = acc.connect()
    world.api.calls.clear()
    second = acc.reconnect()
    assert second is not first and acc.strategy is second
    assert world.api.calls == [
        ("shutdown", "local"),
        ("resolver", "local"),
        ("initialize", "local"),
        ("strategy", "local"),
    ]
    assert world.cleared == [True]
    # clear_session resets Keras' policy, so it is set again.
    assert world.policies == ["mixed_bfloat16", "mixed_bfloat16"]
    assert "runtime.reconnect" in world.kinds("warning")


def test_reconnect_survives_a_dead_system_and_retries(world):
    """Mock TPU (none exists here): the dead TPU cannot shut down; reconnect goes on."""
    acc = world.accelerator(LEGACY_NODE_ENV)
    acc.connect()
    world.api.calls.clear()
    world.api.failures["shutdown"] = [
        tf.errors.UnavailableError(None, None, "Socket closed")
    ]
    world.api.failures["connect_to_cluster"] = [
        tf.errors.UnavailableError(None, None, "worker restarting")
    ]
    acc.reconnect()
    assert [c[0] for c in world.api.calls] == [
        "shutdown",
        "resolver",
        "connect_to_cluster",  # fails, retried
        "resolver",
        "connect_to_cluster",
        "initialize",
        "strategy",
    ]
    assert "runtime.tpu.shutdown_failed" in world.kinds("warning")


def test_reconnect_before_connect(world):
    with pytest.raises(Exception, match="call connect\\(\\) first"):
        world.accelerator(COLAB_TPU_VM_ENV).reconnect()


def test_prefer_tpu_without_a_tpu(world):
    with pytest.raises(AcceleratorNotFoundError) as raised:
        world.accelerator({}).connect()
    assert "prefer='tpu'" in str(raised.value) and "prefer='auto'" in str(raised.value)


def test_module_connect_is_idempotent(world):
    """Mock TPU (none exists here): connect() twice initialises the TPU once."""
    platform = world.platform(COLAB_TPU_VM_ENV)
    first = connect(prefer="tpu", platform=platform, events=world.events)
    again = connect(prefer="tpu", platform=platform)
    assert again is first
    assert [c[0] for c in world.api.calls].count("initialize") == 1
    assert accelerator_module.current_connection().kind == "tpu"


@pytest.mark.parametrize(
    "arguments, field, allowed",
    [
        (dict(prefer="TPU"), "prefer", "'auto', 'tpu', 'gpu', 'cpu'"),
        (dict(precision="fp16"), "precision", "'mixed_bfloat16'"),
        (dict(cpu_replicas=0), "cpu_replicas", ">= 1"),
        (dict(cpu_replicas=2.0), "cpu_replicas", ">= 1"),
        (dict(cpu_replicas=True), "cpu_replicas", ">= 1"),
        (dict(deadline_seconds=0), "deadline_seconds", "> 0"),
        (dict(tpu=8470), "tpu", "tpu='local'"),
    ],
)
def test_bad_arguments_name_the_field(arguments, field, allowed):
    with pytest.raises(ConnectOptionError) as raised:
        connect(**arguments)
    message = str(raised.value)
    bad = next(iter(arguments.values()))
    assert message.startswith(field) and repr(bad) in message and allowed in message
    assert isinstance(raised.value, ValueError)


def test_gpu_runtime_with_a_cpu_only_tensorflow(world, tmp_path):
    """Real TensorFlow: this tensorflow-cpu build has no CUDA; the GPU is injected."""
    (tmp_path / "dev").mkdir(exist_ok=True)
    (tmp_path / "dev" / "nvidiactl").touch()
    assert not tf.test.is_built_with_cuda()
    for prefer in ("gpu", "auto"):  # auto must not hide it behind a CPU fallback
        acc = Accelerator(
            ConnectOptions(prefer=prefer), platform=world.platform({"COLAB_GPU": "1"})
        )
        with pytest.raises(GPUSupportMissingError) as raised:
            acc.connect()
        message = str(raised.value)
        assert "built without CUDA" in message and "/dev/nvidiactl" in message
        assert f"pip install 'tensorflow[and-cuda]=={tf.__version__}'" in message


def test_tensorflow_not_installed(world, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import now fails
    cpu = Accelerator(ConnectOptions(prefer="cpu"), platform=world.platform({}))
    with pytest.raises(TensorFlowNotInstalledError) as raised:
        cpu.connect()
    assert "pip install tensorflow" in str(raised.value)
    on_tpu = Accelerator(
        ConnectOptions(prefer="tpu"),
        platform=world.platform(GCP_TPU_ENV, tpu_api=None),
    )
    with pytest.raises(TensorFlowNotInstalledError) as raised:
        on_tpu.connect()
    assert "pip install tensorflow-tpu --find-links=" in str(raised.value)
    assert isinstance(raised.value, ImportError)
    # Colab's TPU runtime runs JAX; tensorflow-tpu there does not see the TPU.
    on_colab_tpu = Accelerator(
        ConnectOptions(prefer="tpu"),
        platform=world.platform(COLAB_TPU_VM_ENV, tpu_api=None),
    )
    with pytest.raises(TensorFlowNotInstalledError) as raised:
        on_colab_tpu.connect()
    assert "runs Keras on JAX" in str(raised.value)
    # Everything the agent offers works on JAX: the fix sends no one away.
    for way in ("agent.fit", "agent.run", "agent.restore", "recovery"):
        assert way in str(raised.value), way
    assert "not supported" not in str(raised.value)
    assert "Colab GPU runtime" in str(raised.value)
    assert "tensorflow-tpu --find-links" not in str(raised.value)
