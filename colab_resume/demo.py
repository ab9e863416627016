"""``colab-resume demo``: a session dies silently and the run directory tells.

The story, in real processes on a local run directory:

1. A holder process takes the run and beats while it "trains" (it
   advances a step counter; real training arrives with the agent).
2. A second session tries to take the run while the holder lives: it
   watches the heartbeat, sees a new beat, and refuses.
3. The holder is killed with SIGKILL, as a Colab VM vanishes: no cleanup,
   no last words.
4. ``inspect`` reports the run DEAD once the heartbeat is older than
   ``dead_after_seconds``; a new session takes lease 2 and continues.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

HEARTBEAT_SECONDS = 0.5
DEAD_AFTER_SECONDS = 2.0


def _holder(run_dir: str) -> None:
    """Child process: take the run and advance the step forever."""
    from colab_resume.heartbeat import RunSession, SessionOptions
    from colab_resume.storage import Storage

    options = SessionOptions(
        heartbeat_seconds=HEARTBEAT_SECONDS, dead_after_seconds=DEAD_AFTER_SECONDS
    )
    session = RunSession.open(Storage(run_dir), options)
    step = 0
    while True:
        step += 1
        session.update(state="training", step=step, accelerator="cpu (demo)")
        time.sleep(0.05)


def main(run_dir: str | None = None) -> int:
    """Run the demo; prints a timeline. Returns 0 when every act behaved."""
    import colab_resume as cr
    from colab_resume.errors import RunInUseError
    from colab_resume.heartbeat import RunSession, SessionOptions
    from colab_resume.storage import Storage

    run_dir = run_dir or os.path.join(tempfile.mkdtemp(prefix="colab-resume-demo-"), "run")
    start = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - start:6.2f}s] {text}", flush=True)

    say(f"run directory: {run_dir}")
    child = subprocess.Popen([sys.executable, "-m", "colab_resume.demo", "--holder", run_dir])
    try:
        status = cr.inspect(run_dir)
        while status.state != "ALIVE" or not status.step:
            time.sleep(0.2)
            status = cr.inspect(run_dir)
        say(f"holder pid {child.pid} took the run: {status.state}, step {status.step}")

        say("a second session tries to take the run while the holder lives...")
        try:
            RunSession.open(Storage(run_dir), SessionOptions(heartbeat_seconds=HEARTBEAT_SECONDS))
            say("UNEXPECTED: the second session took a live run")
            return 1
        except RunInUseError as exc:
            say(f"refused, as it should be: {str(exc)[:100]}...")

        time.sleep(1.0)
        before = cr.inspect(run_dir)
        say(f"status: {before.state}, step {before.step}, beat {before.heartbeat_age_s}s ago")
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        killed_at = time.monotonic()
        say("holder killed with SIGKILL (no cleanup, like a vanished Colab VM)")

        status = cr.inspect(run_dir)
        while status.state != "DEAD":
            say(f"status: {status.state}, heartbeat {status.heartbeat_age_s}s old")
            time.sleep(0.5)
            status = cr.inspect(run_dir)
        detected = time.monotonic() - killed_at
        say(f"status: DEAD after {detected:.1f}s ({status.detail})")
        bound = DEAD_AFTER_SECONDS + HEARTBEAT_SECONDS + 1.0
        if detected > bound:
            say(f"UNEXPECTED: detection took longer than {bound:.1f}s")
            return 1

        session = RunSession.open(
            Storage(run_dir), SessionOptions(heartbeat_seconds=HEARTBEAT_SECONDS)
        )
        session.update(state="training", step=status.step)
        say(f"new session took lease {session.lease}; the run continues")
        session.close("stopped")
        say(f"try: colab-resume ls {run_dir}")
        return 0
    finally:
        if child.poll() is None:
            child.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--holder", metavar="RUN_DIR")
    args = parser.parse_args()
    if args.holder:
        _holder(args.holder)
    else:
        sys.exit(main())
