"""Every Python block of the README and the docs runs as written, or says in
its fence why it cannot (tests/support/doc_snippets.py has the rule).

Each runs in a process of its own, in a scratch directory, with Cloud
Storage pointed at the GCS emulator (``STORAGE_EMULATOR_HOST``; the
buckets a block names are made first), as a reader would run it with a
bucket of their own. Blocks on Keras' JAX backend run in tests/on_jax.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error

import pytest
from support.doc_snippets import blocks

RUNNABLE = [b for b in blocks() if b.fragment is None and not b.on_jax]


def test_every_block_runs_or_says_why_not() -> None:
    assert len(blocks()) >= 10  # the reader finds them all
    for block in blocks():
        assert block.fragment is None or len(block.fragment) > 10, block


@pytest.mark.parametrize("block", RUNNABLE, ids=str)
def test_the_block_runs(block, emulator, tmp_path) -> None:
    for bucket in set(re.findall(r"gs://([a-z0-9_.-]+)/", block.code)):
        try:
            emulator.create_bucket(bucket)
        except urllib.error.HTTPError as exc:
            assert exc.code == 409, exc  # made for an earlier block
    env = {**os.environ, "STORAGE_EMULATOR_HOST": emulator.url}
    ran = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, f"{block}:\n{block.code}\n{ran.stderr[-3000:]}"
