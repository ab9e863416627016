"""keras-hub task models killed and rerun, on whichever backend runs the test.

``tests/workers/hub_worker.py`` builds a tiny task model from config (never a
download) and fine-tunes it through ``agent.fit``; :func:`killed_and_rerun`
runs it straight, then SIGKILLed mid-run and rerun, and compares every model
and optimizer variable bitwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from support.compare import load
from support.processes import WORKERS, python_path

KILL_AT = 9  # saves every 3 steps, 5 steps an epoch: a resume mid-epoch


def hub_worker(run_dir: str, out: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``tests/workers/hub_worker.py`` in a fresh process, awaited."""
    env = dict(os.environ, PYTHONPATH=python_path())
    env.pop("XLA_FLAGS", None)
    return subprocess.run(
        [sys.executable, os.path.join(WORKERS, "hub_worker.py"), run_dir, out, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )


def killed_and_rerun(tmp: str, *args: str) -> list[int]:
    """Run straight, then killed at :data:`KILL_AT` and rerun; assert bitwise
    equal ends. Returns the steps the rerun restored from."""
    import json

    straight = hub_worker(f"{tmp}/a", f"{tmp}/a-out", *args)
    assert straight.returncode == 0, straight.stderr[-4000:]
    killed = hub_worker(
        f"{tmp}/b", f"{tmp}/b-out", *args, "--kill-at-step", str(KILL_AT)
    )
    assert killed.returncode == -9, killed.stderr[-4000:]
    assert f"KILLING at step {KILL_AT}" in killed.stdout  # it died training
    rerun = hub_worker(f"{tmp}/b", f"{tmp}/b-out", *args)
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    want = load(f"{tmp}/a-out/weights.npz")
    got = load(f"{tmp}/b-out/weights.npz")
    assert sorted(got) == sorted(want)
    differ = [name for name in want if got[name].tobytes() != want[name].tobytes()]
    assert not differ, differ
    with open(f"{tmp}/b-out/result.json") as handle:
        restored: list[int] = json.load(handle)["restored"]
    # A mid-epoch checkpoint, before the kill (the one at 9 may still have
    # been uploading when it landed).
    assert len(restored) == 1 and restored[0] in (3, 6, 9), restored
    assert restored[0] % 5, restored
    if "--lora" in args:
        frozen_base_kept_apart(f"{tmp}/b", args)
    return restored


def frozen_base_kept_apart(run_dir: str, args: tuple[str, ...]) -> None:
    """Every checkpoint of a LoRA fine-tune holds the trained part only: the
    frozen base is a shared object (``frozen="once"``, the default) or
    stored nowhere, its SHA-256 recorded (``"rebuild"``)."""
    import glob
    import json

    rebuild = "rebuild" in args
    manifests = sorted(glob.glob(f"{run_dir}/checkpoints/*/MANIFEST.json"))
    assert manifests
    for path in manifests:
        with open(path) as handle:
            manifest = json.load(handle)
        objects = manifest.get("objects") or {}
        own = sum(f["size"] for f in manifest["files"])
        if rebuild:
            assert objects.get("rebuilt") and not objects["files"], path
        else:
            shared = sum(f["size"] for f in objects["files"])
            assert shared > own, (path, shared, own)  # the base, apart


def called_at_once(preprocessor: Any, threads: int = 8) -> list[Exception]:
    """Call ``preprocessor`` on a sentence from ``threads`` threads released
    together, as Grain's reading threads do; what they raised."""
    import threading

    start, failures = threading.Barrier(threads), []

    def call() -> None:
        start.wait()
        try:
            preprocessor(["the quick fox"])
        except Exception as exc:  # noqa: BLE001 - what a race raises
            failures.append(exc)

    running = [threading.Thread(target=call) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    return failures


def worker_module() -> Any:
    """``tests/workers/hub_worker.py`` as a module: its tiny models' parts."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "hub_worker", os.path.join(WORKERS, "hub_worker.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
