"""Running the notebooks in notebooks/ with papermill, and reading what they show.

    notebook = execute("quickstart.ipynb", tmp_path, run_dir=..., epochs=2)
    assert "COMPLETED" in text_of(notebook) and pngs(notebook)

papermill is imported only when a notebook runs: the virtualenvs that run
no notebook need not have it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
TIMEOUT = 180  # seconds per cell


def execute(name: str, cwd: Path, **parameters: Any) -> dict[str, Any]:
    """Run notebooks/NAME top to bottom in ``cwd`` with ``parameters`` (papermill
    injects them after the cell tagged ``parameters``); the executed notebook."""
    import papermill

    out = cwd / f"out-{name}"
    # The kernel finds the console script where pip put it (in Colab: on PATH).
    saved = os.environ["PATH"]
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), saved])
    try:
        papermill.execute_notebook(
            str(NOTEBOOKS / name),
            str(out),
            parameters=parameters,
            cwd=str(cwd),
            kernel_name="python3",
            execution_timeout=TIMEOUT,
            progress_bar=False,
        )
    finally:
        os.environ["PATH"] = saved
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def text_of(notebook: dict[str, Any]) -> str:
    """Everything the code cells printed (streams and plain-text results)."""
    parts = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append("".join(output["text"]))
            elif "text/plain" in output.get("data", {}):
                parts.append("".join(output["data"]["text/plain"]))
    return "\n".join(parts)


def pngs(notebook: dict[str, Any]) -> list[str]:
    """The PNG pictures the cells drew (base64)."""
    return [
        output["data"]["image/png"]
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]
