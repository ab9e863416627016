"""The package as users install it: the wheel that ``make wheel`` builds
(the Makefile target, run in a copy of the sources) and an sdist
(``python -m build``), checked by ``twine check``; then the wheel installed
into a fresh virtualenv that has neither TensorFlow nor JAX by the
notebooks' own install cell, run by IPython as Colab runs it (from an
upload folder, with the wheel's dependencies from the index), and its CLI
run there.
"""

from __future__ import annotations

import ast
import email.parser
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXTRAS = {"tf", "jax", "grain", "report", "test", "dev"}


def clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH: a fresh virtualenv must import
    only what is installed in it."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def run(
    *argv: str | Path,
    cwd: Path,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> str:
    result = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env={**clean_env(), **(env or {})},
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


def imported_modules(wheel: zipfile.ZipFile) -> set[str]:
    """The modules that the wheel's Python files import, by their full names."""
    found: set[str] = set()
    for name in wheel.namelist():
        if name.endswith(".py"):
            tree = ast.parse(wheel.read(name))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
                elif (
                    isinstance(node, ast.ImportFrom) and node.module and not node.level
                ):
                    found.add(node.module)
    return found


# A distribution whose module is not its name with "_" for "-".
MODULE_OF = {"google-auth": "google.auth"}


def is_imported(requirement: str, imported: set[str]) -> bool:
    """Whether the module of the distribution ``requirement`` is imported."""
    module = MODULE_OF.get(requirement, requirement.replace("-", "_"))
    return any(name == module or name.startswith(module + ".") for name in imported)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """The wheel from `make wheel` and the sdist, built from copied sources
    (a build writes beside its sources). The suite's own virtualenv stands
    in for the Makefile's .venv, already built (its stamp is fresh)."""
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "Makefile"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "colab_resume",
        src / "colab_resume",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    stamp = tmp / "venv-built"
    stamp.touch()
    dist = tmp / "dist"
    make = ["make", "--no-print-directory", "wheel"]
    out = run(*make, f"PY={sys.executable}", f"STAMP={stamp}", f"DIST={dist}", cwd=src)
    (wheel,) = dist.glob("colab_resume-*-py3-none-any.whl")
    assert str(wheel) in out, out  # it says where the wheel is
    run(
        sys.executable,
        "-m",
        "build",
        "--no-isolation",
        "--sdist",
        "-o",
        dist,
        src,
        cwd=src,
    )
    (sdist,) = dist.glob("*.tar.gz")
    return wheel, sdist


def install_cells() -> dict[str, str]:
    """The install cell of every notebook in notebooks/, by notebook."""
    cells = {}
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        (cell,) = [
            "".join(c["source"])
            for c in notebook["cells"]
            if c["cell_type"] == "code"
            and "".join(c["source"]).startswith("#@title Install colab-resume")
        ]
        cells[path.name] = cell
    return cells


def test_the_wheel_and_sdist_pass_twine_and_declare_no_framework(built):
    wheel, sdist = built
    out = run(
        sys.executable,
        "-m",
        "twine",
        "check",
        "--strict",
        wheel,
        sdist,
        cwd=wheel.parent,
    )
    assert out.count("PASSED") == 2, out

    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(meta).decode())
        assert "colab_resume/py.typed" in archive.namelist()
        assert not [n for n in archive.namelist() if n.startswith("tests/")]
        imported = imported_modules(archive)
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
    # Every install requirement is imported by the package. safetensors is
    # not one: the package writes its layout itself, and only the tests read
    # the files with the library, to check them.
    unused = [r for r in core if not is_imported(requirement_name(r), imported)]
    assert not unused, unused
    test_extra = [r for r in requires if 'extra == "test"' in r]
    assert "safetensors" in {requirement_name(r) for r in test_extra}


def test_every_notebook_installs_from_a_source_that_exists():
    cells = install_cells()
    assert set(cells) == {"quickstart.ipynb", "custom_loop.ipynb", "monitor.ipynb"}
    # One install cell, so the one run below stands for all of them.
    assert len(set(cells.values())) == 1, cells
    (cell,) = set(cells.values())
    # No repository URL: none is published yet, and pip fails on one that
    # does not exist.
    assert "git+" not in cell and "https://" not in cell, cell
    assert "make wheel" in cell and "colab_resume-*-py3-none-any.whl" in cell, cell


# A fresh virtualenv gets IPython and the wheel's dependencies from the index.
@pytest.mark.timeout(900)
def test_the_notebook_install_cell_installs_the_wheel_and_its_cli_runs(built, tmp_path):
    wheel, _ = built
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    # IPython, for the cell's %pip (Colab's kernel has it).
    run(python, "-m", "pip", "install", "-q", "ipython", cwd=tmp_path, timeout=240)
    (cell,) = set(install_cells().values())
    cell_file = tmp_path / "install.ipy"
    cell_file.write_text(cell)
    ipython = [venv / "bin" / "ipython", "--colors=NoColor", cell_file]
    env = {"IPYTHONDIR": str(tmp_path / "ipython")}

    # Nothing uploaded: the cell stops and says how to make the wheel.
    empty = tmp_path / "empty"
    empty.mkdir()
    failed = subprocess.run(
        [str(a) for a in ipython],
        cwd=empty,
        env={**clean_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode != 0, failed.stdout + failed.stderr
    assert "FileNotFoundError" in failed.stdout + failed.stderr
    assert "with `make wheel`" in failed.stdout + failed.stderr

    # The wheel uploaded into the working directory (Colab's /content).
    upload = tmp_path / "upload"
    upload.mkdir()
    shutil.copy(wheel, upload / wheel.name)
    out = run(*ipython, cwd=upload, timeout=280, env=env)
    assert f"installing {upload / wheel.name}" in out, out

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
