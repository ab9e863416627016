"""``colab-resume demo``: train, die silently, detect it, resume.

The story itself is :mod:`colab_resume.demo` (one process) and
:mod:`colab_resume.demo_multihost` (two JAX processes); the processes they
start import Keras, the command line never does.
"""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser("demo", help="Train, die silently, detect it, resume.")
    demo.add_argument(
        "--run-dir", help="where to put the demo run (default: a temp dir)"
    )
    demo.add_argument(
        "--processes",
        type=int,
        default=1,
        help="2: one run on two JAX processes loses one and resumes (needs jax)",
    )
    demo.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.processes == 2:
        from colab_resume.demo_multihost import main as multihost_main

        return multihost_main(run_dir=args.run_dir)
    if args.processes != 1:
        raise SystemExit("colab-resume demo: --processes is 1 or 2")
    from colab_resume.demo import main as demo_main

    return demo_main(run_dir=args.run_dir)
