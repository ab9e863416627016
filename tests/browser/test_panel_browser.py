"""The panel in a real browser: JupyterLab in headless Chromium, a real click on Stop.

Run with ``make browser-test`` (not part of ``make test``: it needs
JupyterLab, Playwright's Python package and Debian's Chromium, several
hundred MB that the main suite does not). The test:

1. starts a JupyterLab server on loopback with a notebook whose first cell
   displays ``agent.panel()`` and then trains for far longer than the test
   waits, and whose second cell prints the run's status;
2. opens it in headless Chromium, runs both cells, waits until the panel
   shows training progress *rendered in the page* (so the widget updates
   sent from the training loop reach the browser);
3. clicks the panel's **Stop** button while the first cell is still running;
4. asserts the cell ends long before its natural end, that the agent
   checkpointed and stopped cleanly, and that the queued second cell ran.
A screenshot of the page with the panel is left in ``build/``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

playwright = pytest.importorskip(
    "playwright.sync_api", reason="browser test: run it with `make browser-test`"
)

CHROMIUM = os.environ.get("COLAB_RESUME_CHROMIUM", "/usr/bin/chromium")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOTAL_STEPS = 100_000  # far more than the test waits for: only Stop ends it early

TRAIN_CELL = f"""
import time, keras, numpy as np, tensorflow as tf
import colab_resume as cr

x = np.random.RandomState(0).randn(256, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)

def build_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model

def make_dataset(epoch):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()

class Slow(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.005)

agent = cr.Agent("run", save_every_steps=500, heartbeat_seconds=2, prefer="cpu")
display(agent.panel())
started = time.monotonic()
agent.fit(build_model, make_dataset, epochs=1, steps_per_epoch={TOTAL_STEPS},
          callbacks=[Slow()], verbose=0)
print("FIT RETURNED after %.1fs" % (time.monotonic() - started))
"""

STATUS_CELL = """
status = agent.status()
print("STATUS", status.state, status.holder_state, status.checkpoint_step,
      agent.controls.stop_requested)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_notebook(path: str) -> None:
    def cell(source: str) -> dict:
        return {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": source.strip().splitlines(keepends=True),
        }

    notebook = {
        "cells": [cell(TRAIN_CELL), cell(STATUS_CELL)],
        "metadata": {
            "kernelspec": {
                "display_name": "Python 3",
                "language": "python",
                "name": "python3",
            },
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    with open(path, "w") as handle:
        json.dump(notebook, handle)


@pytest.fixture
def jupyterlab(tmp_path):
    port, token = free_port(), "colab-resume-test"
    write_notebook(str(tmp_path / "panel.ipynb"))
    log = open(tmp_path / "jupyter.log", "wb")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={tmp_path}",
            "--ServerApp.disable_check_xsrf=True",
            "--allow-root",  # CI runs as root
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and server.poll() is None:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        server.kill()
        raise AssertionError(open(tmp_path / "jupyter.log").read()[-3000:])
    yield f"{base}/lab/tree/panel.ipynb?token={token}"
    server.terminate()
    server.wait(timeout=30)
    log.close()


def screenshot(page, name: str) -> None:
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    page.screenshot(path=os.path.join(ROOT, "build", name))


def run_and_stop(page, url: str) -> tuple[float, str]:
    """Run both cells, click Stop mid-fit; returns (seconds to stop, STATUS line)."""
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    # Wait until the kernel is up, then Run > Run All Cells (the second queues).
    page.get_by_text(re.compile(r"\| Idle")).first.wait_for(timeout=90_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()

    # The panel renders and shows steps advancing: updates reach the page.
    stop = page.locator(".jp-OutputArea button", has_text="Stop")
    stop.wait_for(timeout=120_000)
    output = page.locator(".jp-OutputArea").first

    def shown_step() -> int:
        found = re.findall(r"step ([\d,]+)", output.inner_text())
        return int(found[0].replace(",", "")) if found else 0

    deadline = time.monotonic() + 120
    while shown_step() == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    first = shown_step()
    time.sleep(3)
    assert shown_step() > first > 0, "the panel did not refresh during fit"
    screenshot(page, "panel-browser.png")

    clicked = time.monotonic()
    stop.click()
    page.locator(".jp-OutputArea", has_text="FIT RETURNED").first.wait_for(
        timeout=60_000
    )
    stopped_after = time.monotonic() - clicked
    status = page.locator(".jp-OutputArea", has_text="STATUS").first
    status.wait_for(timeout=60_000)
    screenshot(page, "panel-browser-stopped.png")
    line = [x for x in status.inner_text().splitlines() if x.startswith("STATUS")]
    return stopped_after, line[0]


def test_stop_button_clicked_in_the_browser_stops_a_running_fit(jupyterlab):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            stopped_after, line = run_and_stop(page, jupyterlab)
        except Exception:
            screenshot(page, "panel-browser-failed.png")
            raise
        finally:
            browser.close()

    assert stopped_after < 30, stopped_after  # not the 100k steps' natural end
    _, state, holder_state, checkpoint_step, stop_requested = line.split()
    assert (state, holder_state, stop_requested) == ("DEAD", "stopped", "True")
    assert int(checkpoint_step) > 0  # it checkpointed before stopping
