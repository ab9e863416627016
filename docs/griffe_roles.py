"""A griffe extension for the docs site: Sphinx roles in docstrings, as code.

The package's docstrings name other objects the Sphinx way
(``:class:`~colab_resume.storage.Storage```, ``:meth:`fit```), which
mkdocstrings would show raw. This turns each into inline code, the
target's last part where Sphinx would show it (``~``), with ``()`` after a
function or method as Sphinx adds. Loaded by mkdocs.yml
(``extensions: [docs/griffe_roles.py:SphinxRoles]``); not part of the
package.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(
    r":(?:py:)?(class|meth|func|mod|attr|data|exc|obj|const):`(~?)([^`<]+?)(?:\s*<([^>]+)>)?`"
)


def code_of(match: re.Match[str]) -> str:
    role, short, text, target = match.groups()
    name = (target or text).strip()
    if target:  # :class:`shown text <target>`
        shown = text.strip()
    elif short:
        shown = name.rsplit(".", 1)[-1]
    else:
        shown = name
    if role in ("meth", "func") and not shown.endswith(")"):
        shown += "()"
    return f"`{shown}`"


def plain(text: str) -> str:
    """``text`` with every Sphinx role written as inline code."""
    return _ROLE.sub(code_of, text)


class SphinxRoles(griffe.Extension):
    """Rewrites each object's docstring as it is loaded (see the module doc)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
