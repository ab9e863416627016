"""The docs' Python blocks on Keras' JAX backend run as written, without
TensorFlow (the rule: tests/support/doc_snippets.py; the others run in
tests/test_doc_snippets.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.doc_snippets import blocks

ON_JAX = [b for b in blocks() if b.fragment is None and b.on_jax]


def test_there_are_jax_blocks() -> None:
    assert ON_JAX, "no runnable block sets KERAS_BACKEND=jax"


@pytest.mark.parametrize("block", ON_JAX, ids=str)
def test_the_block_runs_on_jax(block, tmp_path) -> None:
    ran = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, f"{block}:\n{block.code}\n{ran.stderr[-3000:]}"
    assert list(tmp_path.glob("runs/*/run.json")), "the block made no run"
