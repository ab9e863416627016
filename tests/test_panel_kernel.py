"""The panel's buttons act while a cell trains: proven with a real kernel.

A real ipykernel is started (jupyter_client), a cell shows an agent's panel
and then loops the way training does (the agent's tick after every step);
while that cell runs, the client sends a real ``comm_msg`` click on the
Stop button — exactly what a browser sends — and a second cell is queued
behind. The Stop flag must flip before the loop ends, and the queued cell
must still run afterwards (messages the pump takes and hands back are not
lost).

By default the kernel runs in this virtualenv (ipywidgets 8, ipykernel 7).
``make colab-test`` also runs it in a virtualenv with Colab's versions
(ipywidgets 7.7, ipykernel 6), named by ``COLAB_RESUME_KERNEL_PYTHON``.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import time

import pytest

jupyter_client = pytest.importorskip(
    "jupyter_client", reason="the test extras install jupyter_client"
)
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHONS = [pytest.param(sys.executable, id="this-venv")]
if os.environ.get("COLAB_RESUME_KERNEL_PYTHON"):
    PYTHONS.append(
        pytest.param(os.environ["COLAB_RESUME_KERNEL_PYTHON"], id="colab-versions")
    )

SETUP = """
import tempfile, time, ipywidgets, ipykernel
import colab_resume as cr
from IPython.display import display
agent = cr.Agent(tempfile.mkdtemp())
panel = agent.panel()
display(panel)
print("VERSIONS", ipywidgets.__version__, ipykernel.__version__)
print("PUMP", panel.pump is not None)
print("CONSOLE QUIET", agent._console.panel_shown)  # internal: the panel says it all
"""

LOOP = """
print("LOOPING", flush=True)
started = time.monotonic()
while time.monotonic() - started < 30 and not agent._controls.stop_requested:
    agent._loop.progress.tick()  # internal: what StepDuties calls after every step
    time.sleep(0.002)        # one "training step"
print("STOPPED", agent._controls.stop_requested, round(time.monotonic() - started, 1))
"""


@pytest.fixture(params=PYTHONS)
def kernel(request, tmp_path):
    spec_dir = tmp_path / "kernels" / "crtest"
    spec_dir.mkdir(parents=True)
    argv = [request.param, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "crtest", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    manager = KernelManager(kernel_name="crtest", kernel_spec_manager=specs)
    env = dict(os.environ, PYTHONPATH=REPO)
    manager.start_kernel(env=env)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=90)
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def _collect(client, until, timeout: float) -> list[dict]:
    """iopub messages until ``until(messages)`` is true."""
    messages: list[dict] = []
    deadline = time.monotonic() + timeout
    while not until(messages):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out; iopub said: {_stdout(messages)!r}")
        try:
            messages.append(client.get_iopub_msg(timeout=min(left, 1.0)))
        except queue.Empty:
            continue
    return messages


def _stdout(messages: list[dict]) -> str:
    """What the cells printed, errors included (so a failure shows why)."""
    parts = []
    for m in messages:
        if m["msg_type"] == "stream":
            parts.append(m["content"]["text"])
        elif m["msg_type"] == "error":
            parts.append("\n".join(m["content"]["traceback"]))
    return "".join(parts)


def _idle(msg_id: str):
    def done(messages: list[dict]) -> bool:
        return any(
            m["msg_type"] == "status"
            and m["content"]["execution_state"] == "idle"
            and m["parent_header"].get("msg_id") == msg_id
            for m in messages
        )

    return done


def _button_comm(messages: list[dict], label: str) -> str:
    for m in messages:
        if m["msg_type"] != "comm_open":
            continue
        state = m["content"]["data"].get("state", {})
        if (
            state.get("_model_name") == "ButtonModel"
            and state.get("description") == label
        ):
            return m["content"]["comm_id"]
    raise AssertionError(f"no {label!r} button was opened")


def test_stop_click_acts_while_the_cell_runs(kernel):
    setup = kernel.execute(SETUP)
    out = _collect(kernel, _idle(setup), 90)
    text = _stdout(out)
    assert "PUMP True" in text and "CONSOLE QUIET True" in text, text
    stop = _button_comm(out, "Stop")

    loop = kernel.execute(LOOP)
    seen = _collect(kernel, lambda ms: "LOOPING" in _stdout(ms), 30)
    after = kernel.execute('print("AFTER", agent._controls.stop_requested)')
    time.sleep(0.5)  # the loop is running; the next cell waits behind it
    click = kernel.session.msg(
        "comm_msg",
        {"comm_id": stop, "data": {"method": "custom", "content": {"event": "click"}}},
    )
    clicked_at = time.monotonic()
    kernel.shell_channel.send(click)
    seen += _collect(kernel, _idle(loop), 40)
    reacted = time.monotonic() - clicked_at
    text = _stdout(seen)
    assert "STOPPED True" in text, text
    # Acted while the loop ran (30 s if the click had waited for the cell).
    assert reacted < 10, (reacted, text)
    rest = _collect(kernel, _idle(after), 30)
    assert "AFTER True" in _stdout(rest), _stdout(rest)
    versions = [line for line in _stdout(out).splitlines() if "VERSIONS" in line]
    print(versions, text.strip().splitlines()[-1], f"(acted in {reacted:.2f}s)")
