"""Head to head: colab_resume vs Keras BackupAndRestore and tf.train.CheckpointManager.

    python bench/head_to_head/run.py [--damage flip|truncate] [--only C ...]
        [--json results.json]

Same model, data, seeds and kill points for every contender, on CPU with a
2-replica MirroredStrategy; every death is a real SIGKILL of a real
process, every resume is a rerun of the same script. Prints markdown
tables (ratios measured side by side in this one run) and the command.
Takes about 5-10 minutes on 2 cores. See ``README.md`` beside this file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import report  # noqa: E402
import scenarios  # noqa: E402

CHECKPOINTING = ("bar", "tfcm", "tfcm_async", "cr_gcs", "cr_local")
BASELINES = ("plain_fit", "plain_loop")


def _load_emulator() -> type:
    path = os.path.join(ROOT, "tests", "support", "emulator.py")
    spec = importlib.util.spec_from_file_location("_h2h_emulator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Emulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--damage", choices=["flip", "truncate"], default="flip")
    parser.add_argument("--only", nargs="+", choices=CHECKPOINTING)
    parser.add_argument("--json", help="also write the raw figures here")
    args = parser.parse_args(argv)
    contenders = tuple(args.only or CHECKPOINTING)

    emulator = _load_emulator()()
    emulator.create_bucket(scenarios.BUCKET)
    started = time.perf_counter()
    results: dict = {"clean": {}, "kills": {}, "unavailable": {}, "damage": {}}
    results["live"] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="head-to-head-") as root:
            runner = scenarios.Runner(root, emulator.url)
            # Scenario by scenario, contenders interleaved: noise hits all alike.
            for contender in BASELINES + contenders:
                _say(f"clean run: {contender}")
                results["clean"][contender] = scenarios.uninterrupted(runner, contender)
            for contender in contenders:
                _say(f"kill schedule: {contender}")
                results["kills"][contender] = scenarios.kill_schedule(runner, contender)
            for contender in contenders:
                _say(f"UnavailableError in session: {contender}")
                results["unavailable"][contender] = scenarios.unavailable(
                    runner, contender
                )
            for contender in contenders:
                _say(f"damaged newest checkpoint ({args.damage}): {contender}")
                results["damage"][contender] = scenarios.damaged_newest(
                    runner, contender, args.damage
                )
            for contender in contenders:
                _say(f"second process while the first is alive: {contender}")
                results["live"][contender] = scenarios.liveness(runner, contender)
            report.add_bitwise(results)
    finally:
        emulator.stop()
    results["seconds"] = time.perf_counter() - started
    results["damage_mode"] = args.damage
    command = "python bench/head_to_head/run.py" + (
        f" --damage {args.damage}" if args.damage != "flip" else ""
    )
    if args.only:
        command += " --only " + " ".join(args.only)
    print(report.markdown(results, contenders, command))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


def _say(message: str) -> None:
    print(f"[head-to-head] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
