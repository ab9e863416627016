"""Check, on your own Google Drive, what a gdrive:// run directory relies on.

Not a test and not in CI: it needs a real account. In Colab::

    import colab_resume as cr
    cr.authenticate()
    !python bench/drive_check.py

Elsewhere, with application-default credentials that have the Drive
scope, or with ``--token /path/to/key.json`` (a service account; then pass
``--folder-id`` of a folder shared with it). It works in a new folder
``colab-resume-check-<random>`` (in My Drive or below ``--folder-id``),
prints one line per property it verified, and deletes the folder at the
end, permanently.

Verified: a conditional update with a stale ``If-Match`` is refused (412);
``appProperties`` set with an upload come back (the run's proof); a
trashed file leaves listings, still reads by id and can be restored;
of eight concurrent create-only writes of one name exactly one wins;
a retried create is recognised as its own; Drive's md5Checksum matches
the bytes of a resumable 12 MiB upload, and the download's CRC32C matches
them too; modifiedTime and the Date header agree within a few seconds;
a deleted file is gone, not in the trash.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import threading
import time
import uuid

import google_crc32c

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from colab_resume.storage import Storage, drive_proof  # noqa: E402
from colab_resume.storage.drive import DriveStore  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder-id", help="work below this folder (shared drives)")
    parser.add_argument("--token", help="a service-account key file")
    parser.add_argument("--endpoint", help="a Drive API emulator, to try the script")
    args = parser.parse_args()
    name = f"colab-resume-check-{uuid.uuid4().hex[:8]}"
    base = f"id:{args.folder_id}/" if args.folder_id else ""
    url = f"gdrive://{base}{name}/run"
    options = {"token": args.token} if args.token else {}
    if args.endpoint:
        options["endpoint_url"] = args.endpoint
    storage = Storage(url, options)
    store = storage.store
    assert isinstance(store, DriveStore)
    print(f"working in {url} as {storage.principal}")
    try:
        check(storage, store, url, options)
    finally:
        top = store._run_folder(create=False, timeout=60)
        if top is not None:
            parent = store.api.get(top, "parents", timeout=60)["parents"][0]
            store.api.delete(parent, timeout=60)  # the check's folder, for good
            print(f"deleted {name} permanently")
    return 0


def check(storage: Storage, store: DriveStore, url: str, options: dict) -> None:
    storage.write_bytes("probe.json", b"{}")
    index = store._index
    assert index is not None
    etag = store.api.etag(index, timeout=60)
    assert store.api.replace_if_match(
        index, store.api.download(index, timeout=60).content, etag, timeout=60
    )
    stale = store.api.replace_if_match(index, b'{"files": {}}', etag, timeout=60)
    assert not stale, "Drive accepted an update with a stale If-Match"
    print("ok  a conditional update with a stale If-Match is refused (412)")

    probe = str(store._lookup("probe.json", 60))
    raw = store.api.get(probe, drive_proof.FIELDS, timeout=60)
    assert drive_proof.run_of(raw) == store.folder.run_id, raw
    assert drive_proof.path_of(raw) == "probe.json", raw
    print("ok  appProperties set with an upload come back (the run's proof)")
    folder = store.folder.folder_id
    store.api.call(
        "PATCH",
        f"/drive/v3/files/{probe}",
        params={"fields": "id"},
        json={"trashed": True},
        timeout=60,
    )
    live = store.api.children(
        f"'{folder}' in parents and trashed = false", "id", timeout=60
    )
    assert probe not in {item["id"] for item in live}
    assert Storage(url, options).read_bytes("probe.json") == b"{}"  # restores it
    assert store.api.get(probe, "trashed", timeout=60)["trashed"] is False
    print("ok  a trashed file leaves listings, reads by id and is restored")

    racers = [Storage(url, options) for _ in range(8)]
    barrier = threading.Barrier(len(racers))
    won: list[int] = []

    def race(n: int) -> None:
        barrier.wait()
        try:
            racers[n].write_bytes("lease/00000001.json", b"%d" % n, create_only=True)
            won.append(n)
        except FileExistsError:
            pass

    threads = [threading.Thread(target=race, args=(n,)) for n in range(len(racers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1, f"{len(won)} of 8 creates won"
    print("ok  of 8 concurrent create-only writes of one name exactly one won")

    store.write("lease/00000002.json", b"{}", create_only=True, write_id="again")
    store.write("lease/00000002.json", b"{}", create_only=True, write_id="again")
    assert store.written_by("lease/00000002.json", "again")
    print("ok  a create retried after its answer was lost is recognised as its own")

    payload = os.urandom(12 << 20)
    path = f"/tmp/{uuid.uuid4().hex}.bin"
    with open(path, "wb") as handle:
        handle.write(payload)
    storage.put_file(path, "checkpoints/shard")  # raises unless Drive's MD5 is ours
    size, crc = storage.get_file_checked("checkpoints/shard", path)
    expected = base64.b64encode(google_crc32c.Checksum(payload).digest()).decode()
    assert (size, crc) == (len(payload), expected)
    os.remove(path)
    print("ok  a 12 MiB resumable upload: Drive's md5Checksum and our CRC32C match")

    before = time.time()
    storage.write_bytes("heartbeat.json", b"{}")
    skew = storage.info("heartbeat.json").updated - storage.server_time()
    assert abs(skew) < 5, f"modifiedTime and Date differ by {skew:.1f}s"
    print(
        f"ok  modifiedTime and the Date header agree ({skew:+.2f}s); "
        f"this machine's clock is {before - storage.server_time():+.1f}s off"
    )

    file_id = store._lookup("heartbeat.json", 60)
    storage.delete("heartbeat.json")
    try:
        store.api.get(str(file_id), "id,trashed", timeout=60)
    except FileNotFoundError:
        print("ok  a deleted file is gone for good (not in the trash)")
    else:
        raise AssertionError("the deleted file still exists (in the trash?)")


if __name__ == "__main__":
    sys.exit(main())
