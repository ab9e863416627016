"""Damage only a local run directory can have: file times anyone can set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from support.hostile import stopped_run


def test_a_heartbeat_stamped_in_the_future_is_damage_not_alive_forever(tmp_path):
    url = str(tmp_path / "run")
    storage = stopped_run(url, {})
    beat = storage.read_json("heartbeat/00000001.json")
    beat["state"] = "training"
    storage.write_json("heartbeat/00000001.json", beat)
    hour_ago, next_year = time.time() - 3600, time.time() + 365 * 86400
    os.utime(tmp_path / "run" / "lease" / "00000001.json", (hour_ago, hour_ago))
    os.utime(tmp_path / "run" / "heartbeat" / "00000001.json", (next_year, next_year))

    status = subprocess.run(
        [sys.executable, "-m", "colab_resume", "status", url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    judged = json.loads(status.stdout)
    assert judged["state"] == "DEAD", judged
    assert "in the future" in judged["detail"]
