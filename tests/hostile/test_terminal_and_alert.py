"""Text from a heartbeat reaches terminals and alert commands defanged.

A heartbeat may carry any text. Printed raw, ANSI and other control
characters in ``host`` or ``error`` could clear, retitle or rewrite the
reader's terminal; passed raw to ``watch --on-dead``, a NUL made the alert
crash and a field over 128 KiB hit "argument list too long".
"""

from __future__ import annotations

import shlex
import sys

from support.hostile import cli, crashed, stopped_run

ANSI = "\x1b]0;owned\x07\x1b[2J\x1b[1A"


def test_control_characters_and_huge_fields_are_defanged(
    gcs_run_dir, gcs_options, emulator, tmp_path
):
    storage = stopped_run(gcs_run_dir, gcs_options)
    lease = storage.read_json("lease/00000001.json")
    lease["host"] = f"host{ANSI}"
    storage.write_json("lease/00000001.json", lease)
    beat = storage.read_json("heartbeat/00000001.json")
    beat.update(state="failed", host=f"h{ANSI}", error="boom\0" + ANSI + "x" * 200_000)
    storage.write_json("heartbeat/00000001.json", beat)

    for command in (["status", gcs_run_dir], ["ls", gcs_run_dir]):
        result = cli(emulator, *command)
        assert result.returncode == 0 and not crashed(result), result.stderr
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout
        assert "\\x1b" in result.stdout  # shown, escaped

    seen = tmp_path / "alert.txt"
    alert = (
        f"{shlex.quote(sys.executable)} -c 'import os, sys; "
        'open(sys.argv[1], "w").write(os.environ["COLAB_RESUME_DETAIL"])\' '
        f"{seen}"
    )
    watch = cli(emulator, "watch", gcs_run_dir, "--interval", "0.2", "--on-dead", alert)
    assert watch.returncode == 4 and not crashed(watch), watch.stderr  # FAILED
    assert "\x1b" not in watch.stdout
    detail = seen.read_text()
    assert detail.startswith("the holder stopped on an error: boom")
    assert len(detail) <= 4_096
