"""The Python code blocks of the README and the docs, to run them.

A block fenced ```` ```python ```` is a complete example: the suite runs
it as it is written (``tests/test_doc_snippets.py``; those that set
``KERAS_BACKEND=jax`` run in the JAX suite, ``tests/on_jax``). A block that
cannot run alone says so in its fence, with why::

    ```python title="fragment: a Colab cell (%pip, Colab's sign-in)"

(the docs site shows that title above the block; GitHub ignores it). So
every block either runs or tells its reader it is a piece of something.
"""

from __future__ import annotations

import dataclasses
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_FRAGMENT = re.compile(r'title="fragment: ([^"]+)"')


@dataclasses.dataclass(frozen=True)
class Block:
    """One code block: where it is, its fence's words, its code."""

    path: str  # relative to the repository
    line: int
    info: str
    code: str

    @property
    def fragment(self) -> str | None:
        """Why it cannot run alone, or None for a complete example."""
        found = _FRAGMENT.search(self.info)
        return found.group(1) if found else None

    @property
    def on_jax(self) -> bool:
        return 'os.environ["KERAS_BACKEND"] = "jax"' in self.code

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def documents() -> list[str]:
    """The README and every page of the docs, relative to the repository."""
    found = ["README.md"]
    for folder, _, files in os.walk(os.path.join(ROOT, "docs")):
        found += [
            os.path.relpath(os.path.join(folder, name), ROOT)
            for name in files
            if name.endswith(".md")
        ]
    return sorted(found)


def blocks() -> list[Block]:
    """Every ```` ```python ```` block of :func:`documents`."""
    found = []
    for path in documents():
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            text = handle.read()
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(path, line, match.group(1).strip(), match.group(2)))
    return found
