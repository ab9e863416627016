"""The two notebook frontends the panel is clicked in, and their kernels.

* ``jupyterlab``: JupyterLab 4 with ipywidgets 8, served from this
  virtualenv (``build/venv-browser``); the kernel is the main virtualenv's
  Python (TensorFlow, ipykernel 7, ipywidgets 8).
* ``classic``: the classic notebook 6.5 with the ipywidgets 7 extension
  (``widgetsnbextension`` 3.6), served from ``build/venv-colab``, whose
  Python is also the kernel: ipywidgets 7.7.1, ipykernel 6.17 and IPython
  7.34, the versions Colab ships. Colab's Python has TensorFlow installed;
  this kernel gets it from the main virtualenv, whose site-packages are
  appended *behind* its own, so the widget and kernel packages are the
  Colab ones while TensorFlow and Keras are the main virtualenv's.

The Makefile names the two Pythons in ``COLAB_RESUME_TF_PYTHON`` (the main
virtualenv) and ``COLAB_RESUME_COLAB_PYTHON`` (``build/venv-colab``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
KERNEL_NAME = "colab-resume"
TOKEN = "colab-resume-test"


def python_named_by(variable: str) -> str:
    """The interpreter an environment variable names; fails (never skips) if unset."""
    path = os.environ.get(variable, "")
    assert os.path.isfile(path), (
        f"{variable}={path!r} is not a Python; run the browser tests with "
        "`make browser-test`, which builds and names the virtualenvs"
    )
    return path


def site_packages(python: str) -> list[str]:
    """The site-packages folders of another interpreter."""
    code = (
        "import json, sysconfig; p = sysconfig.get_paths(); "
        "print(json.dumps(sorted({p['purelib'], p['platlib']})))"
    )
    out = subprocess.run([python, "-c", code], check=True, capture_output=True)
    return list(json.loads(out.stdout))


@dataclasses.dataclass(frozen=True)
class Frontend:
    """How to serve a notebook in one frontend and drive it from a page.

    Attributes:
        name: used in test ids and screenshot names.
        server: argv that serves ``root`` on ``port`` (formatted in).
        notebook_path: the notebook's URL path below the server.
        kernel_argv: the kernel's argv (``{connection_file}`` left in).
        wait_for_kernel: waits until the page's kernel is idle.
        run_all: runs every cell from the page's menus.
        printed: CSS selector of the text cells print (not their source).
        settings: files written below the (fresh) Jupyter config folder.
    """

    name: str
    server: list[str]
    notebook_path: str
    kernel_argv: list[str]
    wait_for_kernel: Callable[[Any], None]
    run_all: Callable[[Any], None]
    printed: str
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)


def _lab_wait_for_kernel(page: Any) -> None:
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for(
        timeout=90_000
    )


def _lab_run_all(page: Any) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def _classic_wait_for_kernel(page: Any) -> None:
    page.wait_for_selector("#notebook-container .cell", timeout=90_000)
    page.wait_for_selector("#kernel_indicator_icon.kernel_idle_icon", timeout=90_000)


def _classic_run_all(page: Any) -> None:
    page.locator("#celllink").click()
    page.locator("#run_all_cells > a").click()


def jupyterlab() -> Frontend:
    tf_python = python_named_by("COLAB_RESUME_TF_PYTHON")
    return Frontend(
        name="jupyterlab",
        server=[
            sys.executable,
            "-m",
            "jupyterlab",
            "--port={port}",
            f"--IdentityProvider.token={TOKEN}",
            "--ServerApp.root_dir={root}",
        ],
        notebook_path="lab/tree/panel.ipynb",
        kernel_argv=[tf_python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        wait_for_kernel=_lab_wait_for_kernel,
        run_all=_lab_run_all,
        printed=".jp-OutputArea-output pre",
        # No "news" question over the notebook: nothing to fetch, nothing in the way.
        settings={
            "lab/user-settings/@jupyterlab/apputils-extension/"
            "notification.jupyterlab-settings": {
                "fetchNews": "false",
                "checkForUpdates": False,
            }
        },
    )


def classic() -> Frontend:
    colab_python = python_named_by("COLAB_RESUME_COLAB_PYTHON")
    tensorflow_sites = site_packages(python_named_by("COLAB_RESUME_TF_PYTHON"))
    # site.addsitedir appends: the Colab virtualenv's own packages come first.
    launch = (
        "import site\n"
        f"for path in {tensorflow_sites!r}:\n"
        "    site.addsitedir(path)\n"
        "from ipykernel.kernelapp import launch_new_instance\n"
        "launch_new_instance()\n"
    )
    return Frontend(
        name="classic",
        server=[
            colab_python,
            "-m",
            "notebook",
            "--port={port}",
            f"--NotebookApp.token={TOKEN}",
            "--NotebookApp.notebook_dir={root}",
            "--NotebookApp.show_banner=False",  # no "migrate to Notebook 7" bar
        ],
        notebook_path="notebooks/panel.ipynb",
        kernel_argv=[colab_python, "-c", launch, "-f", "{connection_file}"],
        wait_for_kernel=_classic_wait_for_kernel,
        run_all=_classic_run_all,
        printed=".output_area pre",
    )


FRONTENDS = {"jupyterlab": jupyterlab, "classic": classic}


def write_notebook(path: Path, cells: list[str]) -> None:
    """A notebook of code ``cells`` that runs in the test's kernel."""

    def cell(source: str) -> dict[str, Any]:
        return {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": source.strip().splitlines(keepends=True),
        }

    notebook = {
        "cells": [cell(source) for source in cells],
        "metadata": {
            "kernelspec": {
                "display_name": KERNEL_NAME,
                "language": "python",
                "name": KERNEL_NAME,
            },
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(frontend: Frontend, root: Path) -> Iterator[str]:
    """Serve ``root`` (which holds ``panel.ipynb``); yields the notebook's URL.

    Everything Jupyter writes (config, runtime files, the kernel spec) stays
    under ``root``'s parent, so nothing of the user's home is read or changed.
    """
    home = root.parent / f"{frontend.name}-jupyter"
    spec_dir = home / "data" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": frontend.kernel_argv,
        "display_name": KERNEL_NAME,
        "language": "python",
        "env": {"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    for name, content in frontend.settings.items():
        (home / "config" / name).parent.mkdir(parents=True, exist_ok=True)
        (home / "config" / name).write_text(json.dumps(content))
    env = {
        **os.environ,
        "JUPYTER_PATH": str(home / "data"),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    port = _free_port()
    argv = [a.format(port=port, root=root) for a in frontend.server]
    argv += ["--no-browser", "--ip=127.0.0.1", "--allow-root"]  # CI runs as root
    log_path = home / "server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_until_serving(f"{base}/api/status?token={TOKEN}", server, log_path)
            yield f"{base}/{frontend.notebook_path}?token={TOKEN}"
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_until_serving(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and server.poll() is None:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.3)
    said = log.read_text()[-3000:]
    raise AssertionError(f"the notebook server did not start:\n{said}")
