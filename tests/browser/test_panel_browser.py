"""The panel in a real browser: every button clicked while ``fit`` runs.

Run by ``make browser-test`` (part of ``make test``) in ``build/venv-browser``,
once per frontend (see ``frontends.py``): JupyterLab 4 with ipywidgets 8,
and the classic notebook with ipywidgets 7.7.1 as Colab ships it. Debian's
Chromium is driven headless through Playwright (never a browser download);
if it cannot start the test fails.

A notebook displays ``agent.panel()`` and trains a small real Keras model
on TensorFlow for far longer than the test waits, into a run directory on
the GCS emulator; a second cell is queued behind it. While the first runs:

1. the panel's step count advances *in the rendered page* (widget updates
   sent from the training loop reach the browser), and the run directory's
   heartbeat says ``training``;
2. **Checkpoint now** commits a new checkpoint (read from the run directory);
3. **Pause** commits a checkpoint and holds: the heartbeat goes on, the step
   does not move, in the run directory and on the page; **Resume**
   continues from there;
4. **Stop** ends ``fit`` within seconds, long before its natural end, with
   a final checkpoint at the last step and the holder ``stopped``; the
   queued cell then runs.

Screenshots of each stage land in ``build/browser-artifacts/``
(``<frontend>-<stage>.png``), with the panel alone once Checkpoint now has
landed (``<frontend>-panel.png``: ``make pictures`` puts JupyterLab's in the
README).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from frontends import FRONTENDS, Frontend, serve, write_notebook
from playwright.sync_api import sync_playwright
from support.waiting import wait_for

import colab_resume as cr
from colab_resume.protocol.listing import RunListing
from colab_resume.storage import Storage

# Debian's package `chromium` (the Makefile installs it); a browser that is
# not there fails the test.
CHROMIUM = os.environ.get("COLAB_RESUME_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "browser-artifacts"
# At most 50 steps/s (Slow below): the 8,000 steps would take 160 s or more,
# several times what the test trains for, so only Stop ends the fit early;
# and the progress bar of the README's picture shows progress.
EPOCHS, STEPS_PER_EPOCH = 4, 2_000
CHROMIUM_FLAGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

TRAIN_CELL = """
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

class Slow(keras.callbacks.Callback):  # watchable: at most 50 steps a second
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.02)

# Only the buttons checkpoint here (the time trigger is an hour away).
agent = cr.Agent(RUN_DIR, storage_options=STORAGE_OPTIONS, save_every_seconds=3600,
                 keep=50, heartbeat_seconds=1, prefer="cpu")
display(agent.panel())
started = time.monotonic()
agent.fit(build_model, make_dataset, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH,
          callbacks=[Slow()], verbose=0)
print("FIT RETURNED after %.1fs" % (time.monotonic() - started))
"""

STATUS_CELL = """
print("STATUS", agent._controls.stop_requested, agent.progress().state)  # internal flag
"""


class RunDir:
    """What the run directory says, read the way any other session reads it."""

    def __init__(self, url: str, options: dict[str, str]) -> None:
        self.url, self.options = url, options

    def committed(self) -> list[int]:
        """Steps of the committed checkpoints, oldest first."""
        listing = RunListing.read(Storage(self.url, self.options))
        return [d.name.step for d in listing.committed]

    def status(self) -> cr.RunStatus:
        return cr.inspect(self.url, self.options)


class Panel:
    """The rendered panel, read and clicked as a user would."""

    def __init__(self, page: Any, screenshots: str) -> None:
        self.page = page
        self.root = page.locator(".colab-resume-panel").first
        self.screenshots = screenshots

    def step(self) -> int:
        text = self.root.locator(".colab-resume-progress").inner_text()
        found = re.match(r"step\s+([\d,]+)", text.strip())
        return int(found.group(1).replace(",", "")) if found else 0

    def badge(self) -> str:
        return str(self.root.locator(".colab-resume-badge").inner_text()).strip()

    def click(self, label: str) -> None:
        self.root.get_by_role("button", name=label, exact=True).click()

    def checkpoint(self) -> str:
        return str(self.root.locator(".colab-resume-checkpoint").inner_text())

    def screenshot(self, stage: str) -> None:
        """The page, scrolled to the panel: ``<frontend>-<stage>.png``."""
        self.root.scroll_into_view_if_needed()
        self.page.screenshot(path=str(artifact(f"{self.screenshots}-{stage}.png")))

    def picture(self) -> None:
        """The panel alone: ``<frontend>-panel.png`` (the README shows Lab's)."""
        self.root.screenshot(path=str(artifact(f"{self.screenshots}-panel.png")))


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name


def drive(page: Any, frontend: Frontend, url: str, run: RunDir) -> None:
    """Run the notebook in ``page`` and click every button; asserts as it goes."""
    page.goto(url)
    frontend.wait_for_kernel(page)
    frontend.run_all(page)
    panel = Panel(page, frontend.name)
    panel.root.wait_for(timeout=120_000)

    # 1. Training shows: the page's step count moves, the run directory agrees.
    first = wait_for(panel.step, 120, "a step count in the rendered panel")
    wait_for(lambda: panel.step() > first, 20, "the panel's step count to advance")
    wait_for(lambda: run.status().holder_state == "training", 20, "a training beat")
    assert panel.badge() == "training"
    panel.screenshot("training")

    # 2. Checkpoint now: a new checkpoint is committed, newer than any before.
    before = run.committed()
    clicked_at = panel.step()
    panel.click("Checkpoint now")
    saved = wait_for(
        lambda: [s for s in run.committed() if s not in before],
        30,
        "the checkpoint asked for by Checkpoint now",
    )
    assert min(saved) >= clicked_at and (not before or min(saved) > max(before))
    wait_for(
        lambda: f"step {max(saved):,}" in panel.checkpoint(),
        10,
        "the panel to show the new checkpoint",
    )
    panel.picture()

    # 3. Pause: a checkpoint, then the step holds while heartbeats go on.
    panel.click("Pause")
    wait_for(lambda: run.status().holder_state == "paused", 30, "a paused beat")
    wait_for(lambda: panel.badge() == "paused", 10, "the panel to say paused")
    held = run.status().step
    assert held is not None and held in run.committed(), (held, run.committed())
    # The badge says paused once asked; the step it paused at shows within a tick.
    wait_for(lambda: panel.step() == held, 10, f"the panel to show step {held}")
    time.sleep(3)  # three heartbeats: long enough for a step to slip through
    status = run.status()
    assert (status.step, status.holder_state) == (held, "paused"), status
    assert status.heartbeat_age_s is not None and status.heartbeat_age_s < 3, status
    assert panel.step() == held
    panel.screenshot("paused")

    # ... and Resume continues from there.
    panel.click("Resume")
    wait_for(lambda: (run.status().step or 0) > held, 30, "steps after Resume")
    wait_for(lambda: panel.step() > held, 10, "the panel's steps after Resume")
    assert run.status().holder_state == "training"

    # 4. Stop: fit returns within seconds, with a final checkpoint at its last step.
    panel.click("Stop")
    clicked = time.monotonic()
    returned = page.locator(frontend.printed, has_text="FIT RETURNED").first
    returned.wait_for(timeout=60_000)
    assert time.monotonic() - clicked < 30
    status_line = page.locator(frontend.printed, has_text="STATUS").first
    status_line.wait_for(timeout=60_000)
    assert status_line.inner_text().split()[:3] == ["STATUS", "True", "stopped"]
    wait_for(lambda: panel.badge() == "stopped", 10, "the panel to say stopped")
    final = run.status()
    assert final.holder_state == "stopped", final
    assert final.step is not None and held < final.step < EPOCHS * STEPS_PER_EPOCH
    assert run.committed()[-1] == final.step == final.checkpoint_step, (
        final,
        run.committed(),
    )
    panel.screenshot("stopped")


@pytest.mark.parametrize("name", list(FRONTENDS))
def test_every_panel_button_clicked_in_the_browser_acts_on_a_running_fit(
    name: str, tmp_path: Path, bucket: str, gcs_options: dict[str, str]
) -> None:
    frontend = FRONTENDS[name]()
    root = tmp_path / "notebooks"
    root.mkdir()
    run = RunDir(f"gs://{bucket}/runs/panel", gcs_options)
    cell = (
        TRAIN_CELL.replace("RUN_DIR", repr(run.url))
        .replace("STORAGE_OPTIONS", repr(gcs_options))
        .replace("STEPS_PER_EPOCH", str(STEPS_PER_EPOCH))
        .replace("EPOCHS", str(EPOCHS))
    )
    write_notebook(root / "panel.ipynb", [cell, STATUS_CELL])
    with serve(frontend, root) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),  # a fresh profile each time
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1200, "height": 900},
        )
        page = browser.new_page()
        try:
            drive(page, frontend, url, run)
        except Exception:
            page.screenshot(path=str(artifact(f"{frontend.name}-failed.png")))
            raise
        finally:
            browser.close()
