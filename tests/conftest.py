"""Shared fixtures: the GCS emulator and run directories on it.

The emulator is started once per test session. If it cannot start, every
test that needs it errors (no silent skip): storage is what this product
is about.
"""

from __future__ import annotations

import itertools
import os
import sys

import pytest

# Before anything imports gcsfs: its experimental bucket-type probe costs a
# 60 s gRPC timeout per bucket against an emulator.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.pop("STORAGE_EMULATOR_HOST", None)

sys.path.insert(0, os.path.dirname(__file__))

from emulator import Emulator  # noqa: E402
from faultproxy import fault_proxy  # noqa: E402,F401  (the fault_proxy fixture)

_bucket_numbers = itertools.count(1)


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
