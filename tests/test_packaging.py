"""The package as users install it: ``colab-resume`` built into an sdist and
a wheel (``python -m build``), checked by ``twine check``, installed into a
fresh virtualenv that has neither TensorFlow nor JAX, and its CLI run there.

The wheel goes in with ``--no-deps`` plus only the light runtime
dependencies the CLI needs on a local run directory, at the bounds the
wheel itself declares, so the test stays quick.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# What `colab-resume status` and `ls` import on a local run directory.
LIGHT = ("fsspec", "tenacity", "google-crc32c")
EXTRAS = {"tf", "jax", "report", "test", "dev"}


def run(*argv: str | Path, cwd: Path, timeout: float = 120) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"{argv}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def requirement_name(requirement: str) -> str:
    for stop in "<>=!;[ ~":
        requirement = requirement.split(stop, 1)[0]
    return requirement.strip().lower().replace("_", "-")


def test_the_wheel_installs_without_frameworks_and_its_cli_runs(tmp_path):
    # What the sdist is made of, copied: the build writes beside its sources.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "colab_resume",
        src / "colab_resume",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--no-isolation", "-o", dist, src, cwd=src)
    (wheel,) = dist.glob("colab_resume-*-py3-none-any.whl")
    (sdist,) = dist.glob("*.tar.gz")
    out = run(
        sys.executable, "-m", "twine", "check", "--strict", wheel, sdist, cwd=dist
    )
    assert out.count("PASSED") == 2, out

    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(meta).decode())
        assert "colab_resume/py.typed" in archive.namelist()
        assert not [n for n in archive.namelist() if n.startswith("tests/")]
    assert metadata["Name"] == "colab-resume"
    assert set(metadata.get_all("Provides-Extra")) == EXTRAS
    requires = metadata.get_all("Requires-Dist")
    jax_extra = [r for r in requires if 'extra == "jax"' in r]
    assert {requirement_name(r) for r in jax_extra} == {"jax", "keras"}
    # Never a pin that would make pip replace a TPU runtime's jax or libtpu.
    pins = [r.split(";")[0] for r in jax_extra]
    assert not [r for r in pins if "==" in r or "<" in r or "[" in r or "tpu" in r]
    frameworks = {"tensorflow", "tensorflow-cpu", "jax", "keras"}
    core = [r for r in requires if "extra ==" not in r]
    assert not {requirement_name(r) for r in core} & frameworks

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q"]
    run(*pip, "--no-deps", wheel, cwd=tmp_path)
    light = [r.split(";")[0] for r in core if requirement_name(r) in LIGHT]
    assert len(light) == len(LIGHT), core
    run(*pip, *light, cwd=tmp_path)

    # A run directory with one session that trained to step 7 and stopped.
    from colab_resume.heartbeat import RunSession, SessionOptions
    from colab_resume.storage import Storage

    run_dir = tmp_path / "run"
    session = RunSession.open(Storage(str(run_dir)), SessionOptions())
    session.update(state="training", step=7)
    session.close("stopped")

    cli = venv / "bin" / "colab-resume"
    assert "usage: colab-resume" in run(cli, "--help", cwd=tmp_path)
    assert "STOPPED" in run(cli, "status", run_dir, cwd=tmp_path)
    assert "stopped at step 7" in run(cli, "ls", run_dir, cwd=tmp_path)
    probe = (
        "import sys\n"
        "import colab_resume\n"
        "from colab_resume.cli import main\n"
        f"assert main(['status', {str(run_dir)!r}, '--json']) == 0\n"
        "assert colab_resume.__file__.startswith(sys.prefix), colab_resume.__file__\n"
        "loaded = {'tensorflow', 'jax', 'keras'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    assert '"state": "STOPPED"' in run(python, "-c", probe, cwd=tmp_path)
