"""Moving checkpoint files between the staging directory and storage, in parallel.

One checkpoint's data is written by TensorFlow in several shards (see
``CheckpointManager(shard_bytes=...)``), so parallel transfers keep the
link busy and progress can be reported per shard.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Sequence

from colab_resume.checkpoint.progress import TransferProgress
from colab_resume.storage import Storage

DEFAULT_WORKERS = 8


def upload(
    storage: Storage,
    files: Sequence[tuple[str, str]],
    *,
    progress: TransferProgress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> None:
    """Upload ``(local_path, rel_path)`` pairs; the first failure is raised."""

    def one(pair: tuple[str, str]) -> None:
        local, rel = pair
        storage.put_file(local, rel)
        if progress is not None:
            progress.advance(os.path.getsize(local))

    _run_all(one, files, workers)


def download(
    storage: Storage,
    files: Sequence[tuple[str, str]],
    *,
    progress: TransferProgress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> None:
    """Download ``(rel_path, local_path)`` pairs; the first failure is raised."""

    def one(pair: tuple[str, str]) -> None:
        rel, local = pair
        storage.get_file(rel, local)
        if progress is not None:
            progress.advance(os.path.getsize(local))

    _run_all(one, files, workers)


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
