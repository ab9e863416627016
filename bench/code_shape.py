"""The shape of the package at two commits, side by side: the seams' figures.

Usage::

    python bench/code_shape.py f71b73e HEAD

For each commit (read with ``git archive``, nothing is checked out) it
counts, from the source with ``ast``:

* modules and lines of ``colab_resume/`` and its largest module;
* ``is_jax()`` calls outside ``backend/`` (branches on the framework);
* modules outside ``backend/`` that import TensorFlow or JAX;
* per-protocol branches above the store classes (``is_gcs``,
  ``protocol == "file"``, ``protocol in GCS_PROTOCOLS``...) outside
  ``storage/stores.py``, the one registry;
* modules that build a retry wait schedule of their own;
* import cycles between modules, lazy imports included, and how many of
  them close only through imports under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tarfile
from collections.abc import Iterator

PACKAGE = "colab_resume"
FRAMEWORKS = {"tensorflow", "jax", "jaxlib"}


def sources(commit: str) -> dict[str, str]:
    """``{path inside colab_resume/: source}`` at ``commit``."""
    tar = subprocess.run(
        ["git", "archive", "--format=tar", commit, PACKAGE],
        check=True,
        capture_output=True,
    ).stdout
    found = {}
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.endswith(".py"):
                data = archive.extractfile(member)
                assert data is not None
                relative = member.name[len(PACKAGE) + 1 :]
                found[relative] = data.read().decode("utf-8")
    return found


def module_name(path: str) -> str:
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                inside.update(id(n) for n in ast.walk(child))
    return inside


def imports(path: str, source: str, known: set[str]) -> Iterator[tuple[str, bool]]:
    """``(module imported, only for type checking)`` for package modules."""
    tree = ast.parse(source)
    typing_only = _type_checking_nodes(tree)
    here = module_name(path)
    package = here if path.endswith("__init__.py") else here.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            # The module itself, or the package whose attribute is imported.
            target = name if name in known else None
            if target and target != here:
                yield target, id(node) in typing_only


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _framework_imports(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            if any(a.name.split(".")[0] in FRAMEWORKS for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in FRAMEWORKS:
                return True
    return False


PROTOCOL_BRANCHES = (
    "is_gcs",
    'protocol == "file"',
    "protocol == 'file'",
    "protocol in GCS_PROTOCOLS",
    'protocol in ("gs", "gcs")',
    'protocol == "gs"',
)


def measure(commit: str) -> dict[str, object]:
    files = sources(commit)
    known = {module_name(p) for p in files}
    lines = {p: s.count("\n") for p, s in files.items()}
    largest = max(lines, key=lambda p: lines[p])
    is_jax = sum(
        s.count("is_jax()")
        for p, s in files.items()
        if not p.startswith("backend/") and "def is_jax" not in s
    )
    framework = sorted(
        p
        for p, s in files.items()
        if not p.startswith("backend/") and _framework_imports(s)
    )
    branches = sum(
        s.count(b)
        for p, s in files.items()
        if p != "storage/stores.py"
        for b in PROTOCOL_BRANCHES
    )
    # A home of retrying builds a wait schedule of its own (tenacity's, or
    # a hand-made doubling before a sleep).
    retry_homes = sorted(
        p
        for p, s in files.items()
        if "wait_exponential(" in s
        or "Retrying(" in s
        or ("2 ** " in s and "sleep(" in s)
    )
    graph: dict[str, set[str]] = {m: set() for m in known}
    runtime_graph: dict[str, set[str]] = {m: set() for m in known}
    for p, s in files.items():
        for target, typing_only in imports(p, s, known):
            graph[module_name(p)].add(target)
            if not typing_only:
                runtime_graph[module_name(p)].add(target)
    # A package imports its own __init__'s names: a module importing its
    # package and the package re-exporting it is how packages are built,
    # not a cycle between two modules' reasons to change.
    for graph_ in (graph, runtime_graph):
        for m, targets in graph_.items():
            graph_[m] = {t for t in targets if not m.startswith(t + ".")}
    every = cycles(graph)
    at_run_time = cycles(runtime_graph)
    runtime_backend = sorted(
        module_name(p)
        for p, s in files.items()
        if p.startswith("runtime/")
        and any(t.startswith(f"{PACKAGE}.backend") for t, _ in imports(p, s, known))
    )
    return {
        "modules": len(files),
        "lines": sum(lines.values()),
        "largest module": f"{largest} ({lines[largest]})",
        "storage/store.py lines": lines.get("storage/store.py", 0),
        "is_jax() calls outside backend/": is_jax,
        "framework-importing modules outside backend/": len(framework),
        "per-protocol branches above the stores": branches,
        "runtime/ modules importing backend/": len(runtime_backend),
        "retry homes": len(retry_homes),
        "import cycles (any import)": len(every),
        "import cycles at run time": len(at_run_time),
    }


def main(argv: list[str]) -> None:
    commits = argv or ["HEAD"]
    figures = [measure(c) for c in commits]
    width = max(len(k) for k in figures[0])
    print(f"{'':{width}}  " + "  ".join(f"{c:>22}" for c in commits))
    for key in figures[0]:
        row = "  ".join(f"{str(f[key]):>22}" for f in figures)
        print(f"{key:{width}}  {row}")


if __name__ == "__main__":
    main(sys.argv[1:])
