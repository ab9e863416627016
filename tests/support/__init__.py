"""What the tests share: worker processes, the toy workload, bitwise checks, waits.

- :mod:`support.processes`: one wrapper for every child process a test
  starts (the workers in ``tests/workers/``, the CLI): run it, await its
  output lines, expect its exit code, read what it printed.
- :mod:`support.toy`: the small Keras workload the workers train.
- :mod:`support.compare`: the one strict bitwise comparison of variable
  sets (``.npz`` files, dicts or lists of arrays).
- :mod:`support.waiting`: ``wait_for(condition, timeout, what)``, the only
  way a test waits for something to happen.
- :mod:`support.emulator`, :mod:`support.drive_emulator`: the GCS and Drive
  API emulators the fixtures of ``tests/conftest.py`` start;
  :mod:`support.faultproxy` and :mod:`support.fake_credentials`: faults and
  expiring tokens between a client and them.
- :mod:`support.hostile`, :mod:`support.on_jax`: what the tests of
  ``tests/hostile`` and of ``tests/on_jax`` share.

``tests/`` is on ``sys.path`` under pytest (``pythonpath`` in
pyproject.toml), and on ``PYTHONPATH`` in the scripts the tests start
(:func:`support.processes.python_path`).
"""

from support.compare import assert_bitwise_equal
from support.processes import (
    Process,
    Result,
    cli,
    run_cli,
    run_worker,
    steps_here,
    train_agent,
    worker,
)
from support.waiting import wait_for

__all__ = [
    "Process",
    "Result",
    "assert_bitwise_equal",
    "cli",
    "run_cli",
    "run_worker",
    "steps_here",
    "train_agent",
    "wait_for",
    "worker",
]
