"""The floors of docs/DESIGN.md §3 hold: no import cycle, and `make lint` says no.

Imports are read from the source with ``ast``, those inside functions and
under ``TYPE_CHECKING`` included: a lazy import is still a dependency, and
a cycle kept apart only by laziness is still a cycle. The contract itself
(``.importlinter``, run by ``make lint``) is proven to fail on a planted
import that climbs a floor, run on a copy of the package.
"""

from __future__ import annotations

import ast
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import colab_resume

PACKAGE = pathlib.Path(colab_resume.__file__).parent
ROOT = PACKAGE.parent
LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"


def module_names(package: pathlib.Path) -> dict[str, pathlib.Path]:
    """``{dotted module name: path}`` of every module under ``package``."""
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: pathlib.Path, modules: set[str]) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in it."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                # `from package import module` names the module; any other
                # name is the package's (its __init__) or the module's.
                wanted = f"{source}.{alias.name}"
                targets.add(wanted if wanted in modules else source)
    found = set()
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph(package: pathlib.Path) -> dict[str, set[str]]:
    modules = module_names(package)
    return {
        name: imports_of(name, path, set(modules)) for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (depth-first)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack = [(start, iter(sorted(graph[start])))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif child in on_path:
                return path[path.index(child) :] + [child]
            elif child not in done:
                stack.append((child, iter(sorted(graph.get(child, ())))))
                path.append(child)
                on_path.add(child)
    return None


def test_no_module_imports_itself_round_a_cycle():
    cycle = find_cycle(import_graph(PACKAGE))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_package_imports_itself_round_a_cycle():
    def floor(name: str) -> str:
        return ".".join(name.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for name, imported in import_graph(PACKAGE).items():
        others = {floor(i) for i in imported} - {floor(name), "colab_resume"}
        packages.setdefault(floor(name), set()).update(others)
    cycle = find_cycle(packages)
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_sees_lazy_and_type_checking_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n"
    )
    (package / "sub" / "c.py").write_text("from pkg import a\n")
    assert find_cycle(import_graph(package)) == [
        "pkg.a",
        "pkg.sub.b",
        "pkg.sub.c",
        "pkg.a",
    ]
    (package / "sub" / "c.py").write_text("import json\n")
    assert find_cycle(import_graph(package)) is None


def lint_imports(root: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """``make lint``'s contract check, on the package found under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(ROOT / ".importlinter")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("floors")
    shutil.copytree(
        PACKAGE, root / "colab_resume", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root


def plant(root: pathlib.Path, module: str, line: str) -> str:
    """Add a function importing ``line`` at the end of ``module``; the old text."""
    path = root / "colab_resume" / module
    old = path.read_text(encoding="utf-8")
    path.write_text(old + f"\n\ndef _planted():\n    {line}\n", encoding="utf-8")
    return old


def test_the_contract_holds_on_the_package_as_it_is(package_copy):
    checked = lint_imports(package_copy)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "0 broken" in checked.stdout


@pytest.mark.parametrize(
    ("module", "line", "said"),
    [
        # The storage, two floors below, asking the agent (lazily, as a
        # convenient import would).
        (
            "storage/local.py",
            "from colab_resume.agent import core",
            "colab_resume.storage.local -> colab_resume.agent.core",
        ),
        # A framework outside backend/.
        ("protocol/commit.py", "import jax", "colab_resume.protocol.commit -> jax"),
    ],
)
def test_the_contract_fails_on_a_planted_import(package_copy, module, line, said):
    old = plant(package_copy, module, line)
    try:
        checked = lint_imports(package_copy)
    finally:
        (package_copy / "colab_resume" / module).write_text(old, encoding="utf-8")
    assert checked.returncode != 0, checked.stdout
    assert said in checked.stdout, checked.stdout
    assert "1 broken" in checked.stdout, checked.stdout
