"""``colab-resume watch`` on a run directory it cannot read.

In this process, on a real local run directory: ``watch`` returns, or its
injected ``sleep`` (called only to poll again) fails the test, so a watcher
that would loop for ever fails instead of hanging.
"""

from __future__ import annotations

import io
import json
import sys

from colab_resume.cli.watch import watch
from colab_resume.storage import Storage


def never_poll_again(seconds: float) -> None:
    raise AssertionError("watch retried an error that waiting does not cure")


def test_watch_alerts_and_exits_6_on_a_damaged_record(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "lease").mkdir(parents=True)
    # A lease number no session makes: every read of the run refuses it.
    (run_dir / "lease" / "00005000.json").write_text("{}")
    facts = tmp_path / "facts.json"
    dump = (
        "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps("
        "{k: v for k, v in os.environ.items() if k.startswith('COLAB_RESUME_')}))"
    )
    out = io.StringIO()
    code = watch(
        Storage(str(run_dir)),
        interval=0.1,
        on_dead=f'{sys.executable} -c "{dump}" {facts}',
        out=out,
        sleep=never_poll_again,
    )
    assert code == 6
    assert "UNREADABLE" in out.getvalue() and "claims lease 5000" in out.getvalue()
    env = json.loads(facts.read_text())
    assert env["COLAB_RESUME_STATE"] == "UNREADABLE"
    assert "delete" in env["COLAB_RESUME_DETAIL"]  # the fix reaches the alert
    assert env["COLAB_RESUME_RUN_DIR"] == str(run_dir)
