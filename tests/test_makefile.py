"""`make test` runs every phase even when one fails, and says which failed.

The Makefile is the repository's own, run by real make in a copy of the
tree. The tools each phase calls (ruff, mypy, lint-imports, mkdocs, and the
pythons of the main, JAX and browser virtualenvs) are stand-ins here: the
real phases take half an hour. Each stand-in records that it ran and fails
when told to, which is all `make test` may rely on.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Which stand-in each phase of `make test` calls, in the order they run.
PHASES = {
    "lint": ("ruff", ".venv/bin/ruff"),
    "docs": ("mkdocs", "build/venv-docs/bin/mkdocs"),
    "suite": ("suite", ".venv/bin/python"),
    "jax-test": ("jax", "build/venv-jax/bin/python"),
    "browser-test": ("browser", "build/venv-browser/bin/python"),
}
OTHER_TOOLS = {
    "mypy": ".venv/bin/mypy",
    "lint-imports": ".venv/bin/lint-imports",
    "colab": "build/venv-colab/bin/python",
    "chromium": "path/chromium",
}
STAMPS = (
    ".venv",
    "build/venv-docs",
    "build/venv-jax",
    "build/venv-browser",
    "build/venv-colab",
    "build/venv-torch",
    "build/drive-mock",
)
SOURCES = (
    "setup.py",
    "pyproject.toml",
    "docs/requirements.txt",
    "tests/on_jax/requirements.txt",
    "tests/browser/requirements-lab.txt",
    "tests/browser/requirements-colab.txt",
)


def stand_in(path: Path, name: str) -> None:
    """A tool that appends its name to $LOG and exits 1 if $FAIL names it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        f'echo {name} >> "$LOG"\n'
        f'case " $FAIL " in *" {name} "*) exit 1;; esac\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the Makefile whose virtualenvs are built (stamps newer than
    their sources) and hold stand-in tools."""
    root = tmp_path / "tree"
    root.mkdir()
    shutil.copy(REPO / "Makefile", root / "Makefile")
    for source in SOURCES:
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        (root / source).touch()
        # Older than every stamp, so make rebuilds no virtualenv.
        os.utime(root / source, (1_000_000_000, 1_000_000_000))
    for name, relative in [*PHASES.values(), *OTHER_TOOLS.items()]:
        stand_in(root / relative, name)
    for folder in STAMPS:
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / ".installed").touch()
    return root


def make_test(
    tree: Path, *failing: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = tree / "ran.log"
    env = dict(os.environ)
    env.update(
        LOG=str(log),
        FAIL=" ".join(failing),
        PATH=f"{tree / 'path'}{os.pathsep}{env['PATH']}",
    )
    env.pop("MAKEFLAGS", None)
    env.pop("MAKELEVEL", None)
    result = subprocess.run(
        ["make", "-C", str(tree), "test"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    ran = log.read_text().split() if log.exists() else []
    return result, ran


@pytest.mark.parametrize(
    "failing",
    [("ruff",), ("suite",), ("browser",), ("ruff", "jax")],
    ids=["lint", "suite", "last-phase", "lint-and-jax"],
)
def test_a_failing_phase_skips_none_after_it_and_fails_the_whole(tree, failing):
    result, ran = make_test(tree, *failing)
    output = result.stdout + result.stderr
    for phase, (name, _) in PHASES.items():
        assert name in ran, f"{phase} did not run after {failing} failed:\n{output}"
    assert result.returncode != 0, output
    failed = [phase for phase, (name, _) in PHASES.items() if name in failing]
    assert f"make test: FAILED: {' '.join(failed)} " in result.stdout, output


def test_all_phases_passing_pass(tree):
    result, ran = make_test(tree)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert ran == [
        *("ruff", "ruff", "mypy", "lint-imports"),
        # The JAX phase runs twice: the files three workers share, then the
        # multi-process ones alone.
        *("mkdocs", "suite", "jax", "jax", "browser"),
    ], output
    assert "make test: all phases passed" in result.stdout, output
