"""``colab-resume selftest URL``: what a run directory relies on, on your storage.

The protocol rests on a few behaviours of the storage service (a create
that a second creator loses, listings that show what was just written,
the server's clock, deletes that really delete; on Drive also ``If-Match``
and ``appProperties``). The suite checks them against emulators; this
checks them against the real service, with your credentials, in a scratch
folder ``URL/colab-resume-selftest-<random>`` removed at the end. One line
per assumption, held or not; the exit status is 0 only if all held.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from colab_resume.cli import common
from colab_resume.redact import redact
from colab_resume.retry import RetryPolicy
from colab_resume.storage import Storage
from colab_resume.storage.checksum import StreamingCrc32c

# Each check's storage calls give up within this (a check, not a training run).
_RETRY = RetryPolicy(total_seconds=30.0)
_RACERS = 8
_LARGE = 12 << 20  # over Drive's multipart limit: a resumable upload
_MAX_SKEW_S = 5.0


@dataclasses.dataclass(frozen=True)
class Scratch:
    """The scratch folder, and how to open it again as another session would."""

    storage: Storage
    options: dict[str, Any]

    def another_session(self) -> Storage:
        return Storage(self.storage.url, self.options, retry=_RETRY)


Check = Callable[[Scratch], str]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One assumption, and whether the storage met it."""

    name: str
    held: bool
    detail: str

    def line(self) -> str:
        mark = "held  " if self.held else "FAILED"
        return f"{mark} {self.name}" + (f" ({self.detail})" if self.detail else "")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    selftest = common.add_run_dir_command(
        commands,
        "selftest",
        "Check what a run directory relies on of this storage, in a scratch "
        "folder below URL that is removed after (about a minute).",
    )
    selftest.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from colab_resume.cli.watch import printable

    outcomes = selftest(
        args.run_dir,
        common.storage_options(args),
        say=lambda line: print(printable(line)),
    )
    failed = [o for o in outcomes if not o.held]
    print(
        f"{len(outcomes) - len(failed)} of {len(outcomes)} held"
        + (": colab_resume cannot rely on this storage" if failed else "")
    )
    return 1 if failed else 0


def selftest(
    url: str, options: dict[str, Any], *, say: Callable[[str], None] = print
) -> list[Outcome]:
    """Run every check in a scratch folder below ``url``; remove it after."""
    scratch = f"{url.rstrip('/')}/colab-resume-selftest-{uuid.uuid4().hex[:8]}"
    storage = Storage(scratch, options, retry=_RETRY)
    say(f"checking {scratch} as {storage.principal}")
    outcomes: list[Outcome] = []
    try:
        for name, check in _checks(storage):
            try:
                outcome = Outcome(name, True, check(Scratch(storage, dict(options))))
            except Exception as exc:  # a check that failed, whatever the way
                why = str(exc) if isinstance(exc, AssertionError) else repr(exc)
                outcome = Outcome(name, False, redact(why)[:300])
            outcomes.append(outcome)
            say(outcome.line())
    finally:
        say(_clean_up(storage))
    return outcomes


def _checks(storage: Storage) -> list[tuple[str, Check]]:
    checks: list[tuple[str, Check]] = [
        ("a second create of one object is refused", _create_only),
        (f"of {_RACERS} concurrent creates of one object one wins", _race),
        ("a create retried after a lost answer is known as its own", _retried),
        ("an object is listed right after it is written", _listed),
        (f"a {_LARGE >> 20} MiB upload reads back intact", _intact),
        ("object stamps follow the server's clock", _clock),
        ("a delete removes the object for good", _deleted),
    ]
    from colab_resume.storage.drive import DriveStore

    if isinstance(storage.store, DriveStore):
        from colab_resume.storage import drive_selftest

        checks += drive_selftest.CHECKS
    return checks


def _create_only(scratch: Scratch) -> str:
    storage = scratch.storage
    storage.write_bytes("lease/00000001.json", b"first", create_only=True)
    other = scratch.another_session()
    try:
        other.write_bytes("lease/00000001.json", b"second", create_only=True)
    except FileExistsError:
        assert storage.read_bytes("lease/00000001.json") == b"first", "overwritten"
        return ""
    raise AssertionError("the second create succeeded: two sessions could both win")


def _race(scratch: Scratch) -> str:
    racers = [scratch.another_session() for _ in range(_RACERS)]
    barrier = threading.Barrier(_RACERS)
    won: list[int] = []
    failed: list[BaseException] = []

    def race(n: int) -> None:
        barrier.wait()
        try:
            racers[n].write_bytes("lease/00000002.json", b"%d" % n, create_only=True)
            won.append(n)
        except FileExistsError:
            pass
        except Exception as exc:
            failed.append(exc)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(_RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    assert len(won) == 1, f"{len(won)} of {_RACERS} won"
    return ""


def _retried(scratch: Scratch) -> str:
    store = scratch.storage.store
    store.write("lease/00000003.json", b"{}", create_only=True, write_id="again")
    try:  # the same write again, as after an answer lost on the way back
        store.write("lease/00000003.json", b"{}", create_only=True, write_id="again")
    except FileExistsError:
        pass
    assert store.written_by("lease/00000003.json", "again"), "taken for a lost race"
    return ""


def _listed(scratch: Scratch) -> str:
    storage = scratch.storage
    storage.write_bytes("listed/a.json", b"{}")
    found = [item.path for item in storage.list("listed")]
    assert found == ["listed/a.json"], f"listed {found}"
    return ""


def _intact(scratch: Scratch) -> str:
    storage = scratch.storage
    payload = os.urandom(_LARGE)
    sent = StreamingCrc32c()
    sent.update(payload)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "shard")
        with open(path, "wb") as handle:
            handle.write(payload)
        storage.put_file(path, "checkpoints/shard")
        size, crc = storage.get_file_checked("checkpoints/shard", path)
    assert (size, crc) == (len(payload), sent.value), "the bytes read back differ"
    return "checked by the server's checksum on upload and by CRC32C on download"


def _clock(scratch: Scratch) -> str:
    storage = scratch.storage
    before = time.time()
    storage.write_bytes("clock.json", b"{}")
    now = storage.server_time()
    skew = storage.info("clock.json").updated - now
    assert abs(skew) < _MAX_SKEW_S, f"stamp and Date differ by {skew:+.1f}s"
    return f"{skew:+.1f}s; this machine's clock is {before - now:+.1f}s off"


def _deleted(scratch: Scratch) -> str:
    storage = scratch.storage
    storage.write_bytes("gone.json", b"{}")
    storage.delete("gone.json")
    assert not storage.exists("gone.json"), "still there"
    return ""


def _clean_up(storage: Storage) -> str:
    """Remove the scratch folder; what was done, in words."""
    try:
        from colab_resume.storage.drive import DriveStore

        store = storage.store
        if isinstance(store, DriveStore):
            folder = store.folder.folder_id
            if folder is not None:
                store.api.delete(folder, timeout=60)  # with all it holds
        else:
            for item in storage.list(""):
                storage.delete(item.path)
            storage.remove_leftovers("")
    except Exception as exc:
        return f"could not remove {storage.url}: {redact(repr(exc))}; remove it by hand"
    return f"removed {storage.url}"
