"""Shared fixtures: the GCS and Drive emulators and run directories on them.

Each emulator is started once per test session. If it cannot start, every
test that needs it errors (no silent skip): storage is what this product
is about.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import re

import pytest

# Before anything imports gcsfs: its experimental bucket-type probe costs a
# 60 s gRPC timeout per bucket against an emulator.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.pop("STORAGE_EMULATOR_HOST", None)

from support.drive_emulator import DriveEmulator  # noqa: E402
from support.emulator import Emulator  # noqa: E402
from support.faultproxy import fault_proxy  # noqa: E402,F401  (the fixture)
from support.mlflow_server import mlflow_server  # noqa: E402,F401  (the fixture)

_bucket_numbers = itertools.count(1)

# What makes a test a TensorFlow test: it imports TensorFlow or Keras (the
# Keras here runs on TensorFlow), or it runs a worker that trains.
_TF_IMPORT = re.compile(r"^\s*(import|from)\s+(tensorflow|keras)\b", re.MULTILINE)
_TF_WORKERS = re.compile(
    r"[\"'](agent_worker|checkpoint_worker|light_worker|worker\.py)[\"']"
)
_EMULATOR_FIXTURES = {"emulator", "fault_proxy", "drive_emulator"}


@functools.cache
def _module_uses_tf(path: str) -> bool:
    """Whether a test module imports TensorFlow at its top, or runs a TF worker."""
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    top = "".join(line for line in source.splitlines(True) if not line[:1].isspace())
    return bool(_TF_IMPORT.search(top) or _TF_WORKERS.search(source))


def _uses_tf(item: pytest.Item) -> bool:
    if _module_uses_tf(str(item.path)):
        return True
    function = getattr(item, "function", None)
    try:
        source = inspect.getsource(function) if function is not None else ""
    except (OSError, TypeError):
        return False
    return bool(_TF_IMPORT.search(source))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests ``emulator`` (they use it) and ``tf`` (they run TensorFlow)."""
    for item in items:
        if _EMULATOR_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.emulator)
        if _uses_tf(item):
            item.add_marker(pytest.mark.tf)


@pytest.fixture(scope="session")
def emulator():
    server = Emulator()
    yield server
    server.stop()


@pytest.fixture
def bucket(emulator) -> str:
    """A fresh, empty bucket on the emulator."""
    name = f"bucket-{os.getpid()}-{next(_bucket_numbers)}"
    emulator.create_bucket(name)
    return name


@pytest.fixture
def gcs_options(emulator) -> dict:
    return {"token": "anon", "endpoint_url": emulator.url}


@pytest.fixture
def gcs_run_dir(bucket) -> str:
    return f"gs://{bucket}/runs/test"


@pytest.fixture(scope="session")
def drive_emulator():
    server = DriveEmulator()
    yield server
    server.stop()


@pytest.fixture
def drive_options(drive_emulator) -> dict:
    return drive_emulator.options()


@pytest.fixture
def drive_run_dir(drive_emulator) -> str:
    """A run directory in a folder of its own on the Drive emulator."""
    return f"gdrive://t-{os.getpid()}-{next(_bucket_numbers)}/runs/test"
