"""Moving checkpoint files between the staging directory and storage, in parallel.

One checkpoint's data is written by TensorFlow in several shards (see
``CheckpointManager(shard_bytes=...)``), so parallel transfers keep the
link busy and progress can be reported per shard.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Sequence

from colab_resume.checkpoint.transfer_progress import TransferProgress
from colab_resume.storage import Storage

DEFAULT_WORKERS = 8
# The largest piece one upload may read into memory at a time, for stores
# that send pieces (GCS streams a large file in 1 MiB reads, whatever this).
MAX_CHUNK = 8 << 20
# The smallest piece worth giving an upload: GCS reads 1 MiB at a time.
MIN_CHUNK = 1 << 20
# An upload holds its piece and, while the socket drains, about as much
# again in the event loop's send buffer.
COPIES_PER_CHUNK = 2


def upload_plan(memory_bytes: int, workers: int) -> tuple[int, int]:
    """``(parallel uploads, bytes per piece)`` within ``memory_bytes`` of buffers.

    The memory is spread over the workers before pieces grow: on a far
    store one stream is the ceiling (a few MB/s on Drive), and a streamed
    GCS upload is one request whatever its piece size, so more streams of
    smaller pieces are faster in the same memory. At least one upload of
    at least 1 MiB pieces, whatever the bound.
    """
    share = memory_bytes // (COPIES_PER_CHUNK * max(1, workers))
    chunk = max(MIN_CHUNK, min(MAX_CHUNK, share))
    parallel = memory_bytes // (COPIES_PER_CHUNK * chunk)
    return max(1, min(workers, parallel)), chunk


def upload(
    storage: Storage,
    files: Sequence[tuple[str, str]],
    *,
    progress: TransferProgress | None = None,
    workers: int = DEFAULT_WORKERS,
    memory_bytes: int | None = None,
) -> None:
    """Upload ``(local_path, rel_path)`` pairs; the first failure is raised.

    The local files are the caller's to drop afterwards: a store on the
    same disk takes them by a rename (they are gone after).

    Args:
        memory_bytes: about how much of the files the uploads in flight may
            hold in memory together (None: the store's default, which on
            GCS is each file of up to 50 MiB whole).
    """
    chunk: int | None = None
    if memory_bytes is not None:
        workers, chunk = upload_plan(memory_bytes, workers)

    def put(local: str, rel: str) -> None:
        storage.put_file(local, rel, chunk_bytes=chunk, move=True)

    _transfer(put, files, local=0, progress=progress, workers=workers)


def _transfer(
    move: Callable[[str, str], None],
    pairs: Sequence[tuple[str, str]],
    *,
    local: int,
    progress: TransferProgress | None,
    workers: int,
) -> None:
    """``move(*pair)`` for every pair in parallel; ``pair[local]`` is the local file."""

    def one(pair: tuple[str, str]) -> None:
        size = os.path.getsize(pair[local])  # before: a move takes the file
        move(*pair)
        if progress is not None:
            progress.advance(size)

    _run_all(one, pairs, workers)


def _run_all(
    func: Callable[[tuple[str, str]], None],
    items: Sequence[tuple[str, str]],
    workers: int,
) -> None:
    if not items:
        return
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=max(1, min(workers, len(items))),
        thread_name_prefix="colab-resume-transfer",
    ) as pool:
        futures = [pool.submit(func, item) for item in items]
        try:
            for future in concurrent.futures.as_completed(futures):
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
