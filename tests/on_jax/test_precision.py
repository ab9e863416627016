"""On JAX, ``precision="auto"`` keeps a policy the user set, through a reconnect.

A fresh interpreter: Keras' global policy is process-wide.
"""

from __future__ import annotations

import json

from support.on_jax import run_python

USER_POLICY = """
import json, sys
import keras
import colab_resume as cr

keras.mixed_precision.set_global_policy("mixed_bfloat16")
agent = cr.Agent(sys.argv[1], prefer="cpu")
messages = []
agent.events.subscribe(
    lambda e: e.kind == "runtime.precision" and messages.append(e.message))
agent.connect()
out = {"connected": [agent.connection.precision,
                     keras.mixed_precision.global_policy().name],
       "messages": messages}
agent._accelerator.reconnect()  # internal (what a recovery does): resets Keras' state
out["reconnected"] = [agent.connection.precision,
                      keras.mixed_precision.global_policy().name]
print("RESULT " + json.dumps(out))
"""


def test_auto_keeps_the_users_policy_through_a_reconnect(tmp_path: str) -> None:
    done = run_python(USER_POLICY, str(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    out = json.loads(line.removeprefix("RESULT "))
    assert out["connected"] == ["mixed_bfloat16", "mixed_bfloat16"]
    (message,) = out["messages"]
    assert "precision='auto' keeps the global policy mixed_bfloat16" in message
    assert out["reconnected"] == ["mixed_bfloat16", "mixed_bfloat16"]
