"""A sharded state is saved by the piece and restored into the run's sharding.

Real processes (``sharded_worker.py``) on 8 CPU devices: a model whose
Dense kernels (and so their Adam slots) a ``ModelParallel`` shards over the
``"model"`` axis of a (2, 4) mesh is written by the portable format. Each
distinct shard is written once (replica 0 of the ``"batch"`` axis), as its
own tensor, never gathered whole: the files hold the state's bytes once and
the save's host memory stays within 1.1x of them. Read back on the same
mesh, on a (4, 2) mesh and on one device, every variable is bitwise what
was saved, laid out as the reading run's distribution says.
"""

from __future__ import annotations

import json
import os

import pytest
from support.checkpoints import headers
from support.on_jax import jax_worker
from support.processes import read_out

WIDTH = 512  # 3 MB of Dense kernels, and their Adam slots


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    where = tmp_path_factory.mktemp("sharded")
    directory, out = str(where / "ckpt"), str(where / "saved")
    done = jax_worker("sharded_worker", "save", directory, out, "--width", str(WIDTH))
    assert done.returncode == 0, done.stderr[-4000:]
    return directory, out


def test_each_distinct_shard_is_written_once_and_nothing_is_gathered(saved) -> None:
    directory, out = saved
    _, result = read_out(out)
    tensors = headers(directory)
    with open(os.path.join(directory, "structure.json")) as handle:
        structure = json.load(handle)
    kernel = structure["model"][0]  # dense_a's kernel, sharded over "model"
    assert kernel[1] == [WIDTH, WIDTH], kernel
    pieces = sorted(n for n in tensors if n.startswith("model/000000@"))
    # Four model shards, each written once though the batch axis holds two.
    assert pieces == [f"model/000000@0,{k * WIDTH // 4}" for k in (0, 1, 2, 3)], pieces
    assert all(tensors[p]["shape"] == [WIDTH, WIDTH // 4] for p in pieces)
    assert "model/000000" not in tensors
    stored = sum(e["data_offsets"][1] - e["data_offsets"][0] for e in tensors.values())
    assert stored == result["nbytes"]  # every byte of the state, once
    assert result["peak"] <= 1.1 * result["nbytes"], result


@pytest.mark.parametrize(
    "where",
    [["--mesh", "2,4"], ["--mesh", "4,2"], ["--devices", "1"]],
    ids=["same-mesh", "another-mesh", "one-device"],
)
def test_a_restore_is_bitwise_in_the_reading_runs_layout(saved, tmp_path, where):  # type: ignore[no-untyped-def]
    directory, out = saved
    want, _ = read_out(out)
    done = jax_worker(
        "sharded_worker",
        "restore",
        directory,
        str(tmp_path / "out"),
        "--width",
        str(WIDTH),
        *where,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    got, result = read_out(str(tmp_path / "out"))
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name
    model_axis = {"2,4": 4, "4,2": 2}.get(where[1])
    shards = result["shards"]["sequential/dense_a/kernel"]
    if model_axis is None:  # one device: whole
        assert shards == [[WIDTH, WIDTH]]
        return
    assert shards == [[WIDTH, WIDTH // model_axis]], shards
    assert result["specs"]["sequential/dense_a/kernel"] == [None, "model"]
