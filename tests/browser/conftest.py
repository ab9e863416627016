"""The browser tests run only in ``build/venv-browser`` (``make browser-test``).

That virtualenv has Playwright's Python package and JupyterLab; the main
one has neither, so there this folder is not collected. Where it is
collected nothing is skipped: a browser that cannot start fails the test.
"""

from __future__ import annotations

import importlib.util

_HERE_IS_BROWSER_VENV = (
    importlib.util.find_spec("playwright") is not None
    and importlib.util.find_spec("jupyterlab") is not None
)

# Not collected outside build/venv-browser: `make browser-test` runs them there.
collect_ignore_glob = [] if _HERE_IS_BROWSER_VENV else ["test_*.py", "frontends.py"]
