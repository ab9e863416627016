"""What ``colab-resume ls`` shows: the run directory, by the protocol's parts."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
from typing import Any

from colab_resume.cli import common
from colab_resume.errors import CorruptRecordError, UnsafePathError
from colab_resume.heartbeat.lease import read_lease
from colab_resume.heartbeat.liveness import read_status
from colab_resume.protocol import rundir
from colab_resume.protocol.listing import RunListing
from colab_resume.protocol.records import BeatRecord, RunRecord, parse
from colab_resume.storage import Storage


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ls = common.add_run_dir_command(
        commands, "ls", "List leases, heartbeats and checkpoints."
    )
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from colab_resume.cli.watch import printable

    listing = collect(common.open_run_dir(args))
    print(json.dumps(listing, indent=1) if args.json else printable(render(listing)))
    return 0


def collect(storage: Storage) -> dict[str, Any]:
    """Everything in the run directory, as JSON-able data.

    One listing of the whole run directory serves every part shown, the
    verdict (``status``'s) included.
    """
    storage.check()
    objects = storage.list()
    listing = RunListing.from_objects(storage.url, objects)
    verdict = read_status(storage, listing=listing)
    out: dict[str, Any] = {
        "run_dir": storage.url,
        "state": verdict.state,
        "detail": verdict.detail,
        "run": None,
        "leases": [],
    }
    try:
        where = f"{storage.url}/{rundir.RUN_RECORD}"
        run = parse(RunRecord, storage.read_json(rundir.RUN_RECORD), where)
        out["run"] = dataclasses.asdict(run)
    except FileNotFoundError:
        pass
    except CorruptRecordError as exc:
        out["run"] = {"error": str(exc)}
    beats = {
        o.path: o for o in objects if o.path.startswith(rundir.HEARTBEAT_DIR + "/")
    }
    for number, info in listing.leases:
        entry: dict[str, Any] = {"lease": number, "created": info.updated}
        try:
            entry.update(dataclasses.asdict(read_lease(storage, number, info.path)))
        except (CorruptRecordError, FileNotFoundError) as exc:
            entry["error"] = str(exc)
        beat_path = rundir.heartbeat_path(number)
        if beat_path in beats:
            entry["heartbeat_updated"] = beats[beat_path].updated
            try:
                where = f"{storage.url}/{beat_path}"
                beat = parse(BeatRecord, storage.read_json(beat_path), where)
                entry["heartbeat"] = {
                    "beat": beat.beat,
                    "state": beat.state,
                    "step": beat.step,
                }
            except (CorruptRecordError, FileNotFoundError) as exc:
                entry["heartbeat"] = {"error": str(exc)}
        out["leases"].append(entry)
    _report_blocked_names(storage, out["leases"])
    out["checkpoints"] = [
        {
            "step": entry.name.step,
            "lease": entry.name.lease,
            "committed": entry.committed,
            "files": len([f for f in entry.objects if f != rundir.MANIFEST]),
            "bytes": sum(
                o.size for f, o in entry.objects.items() if f != rundir.MANIFEST
            ),
        }
        for entry in listing.checkpoints
    ]
    out["done"] = any(o.path == rundir.DONE_RECORD for o in objects)
    return out


def _report_blocked_names(storage: Storage, leases: list[dict[str, Any]]) -> None:
    """Add what a listing of objects cannot show: a directory in a record's place.

    Only two such names matter: the holder's heartbeat, and the next lease,
    which no session can take while a directory sits there.
    """
    if leases and "heartbeat" not in leases[-1]:
        error = _directory_in_place(storage, rundir.heartbeat_path(leases[-1]["lease"]))
        if error:
            leases[-1]["heartbeat"] = {"error": error}
    following = (leases[-1]["lease"] if leases else 0) + 1
    error = _directory_in_place(storage, rundir.lease_path(following))
    if error:
        leases.append({"lease": following, "error": error})


def _directory_in_place(storage: Storage, rel: str) -> str | None:
    try:
        storage.info(rel)
    except UnsafePathError as exc:
        return str(exc)
    except FileNotFoundError:
        pass
    return None


def render(listing: dict[str, Any]) -> str:
    """Human-readable text of :func:`collect`'s result."""
    lines = [
        f"run dir   {listing['run_dir']}",
        f"state     {listing['state']}: {listing['detail']}",
    ]
    run = listing["run"]
    if run is None:
        lines.append("run.json  absent (no session has taken this run)")
    elif "error" in run:
        lines.append(f"run.json  UNREADABLE: {run['error']}")
    else:
        lines.append(
            f"run.json  run {run['run_id']}, created {_when(run['created_at'])}, "
            f"colab_resume {run['package_version']}"
        )
    lines.append("leases")
    if not listing["leases"]:
        lines.append("  (none)")
    for lease in listing["leases"]:
        if "session_id" in lease:
            text = (
                f"  {lease['lease']:>4}  session {lease['session_id']} on "
                f"{lease['host']} (pid {lease['pid']}), taken {_when(lease['created'])}"
            )
        else:
            text = f"  {lease['lease']:>4}  UNREADABLE: {lease.get('error')}"
        beat = lease.get("heartbeat")
        if beat and "error" not in beat:
            # A holder that failed before its first step has no step to show.
            at = "" if beat["step"] is None else f" at step {beat['step']}"
            text += (
                f"; beat {beat['beat']} {beat['state']}{at}, "
                f"{_when(lease['heartbeat_updated'])}"
            )
        elif beat:
            text += f"; heartbeat UNREADABLE: {beat['error']}"
        lines.append(text)
    lines.append("checkpoints")
    if not listing["checkpoints"]:
        lines.append("  (none)")
    for ckpt in listing["checkpoints"]:
        mark = "committed  " if ckpt["committed"] else "UNCOMMITTED"
        lines.append(
            f"  step {ckpt['step']:>9}  lease {ckpt['lease']:>4}  {mark}  "
            f"{ckpt['files']} files, {_size(ckpt['bytes'])}"
        )
    lines.append(f"DONE.json {'present' if listing['done'] else 'absent'}")
    return "\n".join(lines)


def _when(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover
