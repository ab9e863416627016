"""Without TensorFlow installed, the package, inspect() and the CLI work.

Each check runs in a fresh interpreter and asserts on ``sys.modules``:
nothing may import TensorFlow (here it is not even installed, so an import
that is caught and ignored would still show up as an attempt only through
sys.modules; the assertion covers both).
"""

from __future__ import annotations

import json
import os

import pytest
from support.on_jax import run_python


def test_tensorflow_is_absent_here() -> None:
    with pytest.raises(ImportError):
        __import__("tensorflow")


def test_import_and_inspect_never_import_tensorflow(tmp_path: str) -> None:
    code = (
        "import sys, json\n"
        "import colab_resume as cr\n"
        "status = cr.inspect(sys.argv[1])\n"
        "print(json.dumps({'state': str(status.state), "
        "'tf': 'tensorflow' in sys.modules}))\n"
    )
    result = run_python(code, str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["tf"] is False
    assert "NEW" in report["state"]


def test_cli_status_never_imports_tensorflow(tmp_path: str) -> None:
    code = (
        "import runpy, sys\n"
        "sys.argv = ['colab-resume', 'status', sys.argv[1], '--json']\n"
        "try:\n"
        "    runpy.run_module('colab_resume', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "else:\n"
        "    code = 0\n"
        "print('TF', 'tensorflow' in sys.modules, 'RC', code)\n"
    )
    result = run_python(code, str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert '"state"' in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "TF False RC 0"


def test_cpu_replicas_after_jax_initialised_says_how_to_fix(tmp_path: str) -> None:
    """cpu_replicas after JAX initialised with fewer devices."""
    code = (
        "import sys, jax\n"
        "jax.devices()  # JAX initialises with one CPU device\n"
        "import colab_resume as cr\n"
        "from colab_resume.runtime import LogicalDevicesError\n"
        "agent = cr.Agent(sys.argv[1], prefer='cpu', cpu_replicas=2)\n"
        "try:\n"
        "    agent.connect()\n"
        "except LogicalDevicesError as exc:\n"
        "    print('DEVICES', exc)\n"
        "one = cr.Agent(sys.argv[1], prefer='cpu')\n"
        "print('CONNECTED', one.connect().__class__.__name__)\n"
        "print('TF', 'tensorflow' in sys.modules)\n"
    )
    result = run_python(code, str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    devices = next(line for line in lines if line.startswith("DEVICES"))
    assert "cpu_replicas=2" in devices and "already initialised with 1" in devices
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=2" in devices
    assert "CONNECTED DataParallel" in lines
    assert lines[-1] == "TF False"


def test_restore_without_keras_names_the_jax_install(tmp_path: str) -> None:
    """Keras hidden from the import system: on JAX the fix is the jax extra
    (a Colab TPU runtime has no TensorFlow to install), and no run is taken."""
    run_dir = os.path.join(tmp_path, "run")
    code = (
        "import sys; sys.modules['keras'] = None\n"
        "import colab_resume as cr\n"
        "agent = cr.Agent(sys.argv[1], prefer='cpu')\n"
        "try:\n"
        "    agent.restore(object())\n"
        "except ImportError as exc:\n"
        "    print('REFUSED', exc)\n"
        "print('TF', 'tensorflow' in sys.modules)\n"
    )
    result = run_python(code, run_dir)
    assert result.returncode == 0, result.stderr
    refused, tf = result.stdout.strip().splitlines()[-2:]
    assert refused.startswith("REFUSED Keras is not installed"), refused
    assert "pip install jax keras" in refused
    assert "TensorFlow" not in refused and "[tf]" not in refused
    assert tf == "TF False"
    assert not os.path.exists(run_dir)  # no lease taken
