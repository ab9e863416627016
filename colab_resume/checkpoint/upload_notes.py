"""What a save says about its uploads: frozen arrays, slow stores, daily caps.

Pure functions and small trackers, called by the checkpoint manager before
an upload starts and after each commit; they decide the words, the
manager emits the events.
"""

from __future__ import annotations

from colab_resume.timings import duration

# Warn once a session's steady uploads, extrapolated to a day, take this
# share of its store's daily upload cap (Drive: 750 GB per user).
CAP_WARN_SHARE = 0.8
DAY_SECONDS = 86_400.0
# A commit that spent this long uploading frozen arrays suggests "rebuild".
SLOW_OBJECTS_SECONDS = 300.0
# An upload of frozen arrays estimated, before it starts, to take longer
# than this suggests "rebuild" at once.
SLOW_ESTIMATE_SECONDS = 60.0
# A session's uploads give a measured rate once they took this long
# together: shorter ones mostly measure each request's turnaround.
MEASURED_SECONDS = 5.0


def frozen_note(
    *, mode: str, own: int, uploaded: int, shared: int, rebuilt: int
) -> str:
    """The tail of a commit's message about its frozen arrays ("" for none).

    Args:
        mode: the ``frozen`` setting.
        own: bytes of the checkpoint's own files.
        uploaded: bytes this commit uploaded (own files and new objects).
        shared: bytes of the shared objects it references.
        rebuilt: how many frozen arrays it records by fingerprint only.
    """
    if rebuilt:
        return (
            f"; frozen='rebuild': {rebuilt} frozen arrays not written, their "
            f"SHA-256 recorded"
        )
    if not shared:
        return ""
    fresh = uploaded - own
    how = (
        f"{fresh / 1e6:.1f} MB uploaded now"
        if fresh > 0
        else "already stored, not uploaded"
    )
    return (
        f"; frozen='{mode}': {shared / 1e6:.1f} MB of frozen arrays in shared "
        f"objects, {how}"
    )


def slow_objects(fresh: int, seconds: float) -> str | None:
    """The suggestion of ``"rebuild"`` after a slow first upload of frozen
    arrays (``fresh`` bytes of objects in a commit of ``seconds``), or None."""
    if fresh <= 0 or seconds <= SLOW_OBJECTS_SECONDS:
        return None
    return (
        f"the first save of the frozen arrays ({fresh / 1e9:.2f} GB) took "
        f"{seconds:.0f}s to commit on this store; later saves reference them. "
        f"frozen='rebuild' writes none of them (a resume then checks that "
        f"build_model() made the same ones)."
    )


def frozen_estimate(
    fresh: int, bytes_per_second: float, basis: str
) -> tuple[str, float] | None:
    """The suggestion of ``"rebuild"`` before an upload of ``fresh`` bytes
    of frozen arrays starts, with its estimated seconds, where at
    ``bytes_per_second`` it takes longer than :data:`SLOW_ESTIMATE_SECONDS`;
    else None.

    Args:
        basis: where the rate comes from, in a few words for the message.
    """
    if fresh <= 0 or bytes_per_second <= 0:
        return None
    seconds = fresh / bytes_per_second
    if seconds <= SLOW_ESTIMATE_SECONDS:
        return None
    return (
        f"uploading the frozen arrays ({fresh / 1e9:.2f} GB) for this run will "
        f"take about {duration(seconds)} at {rate_text(bytes_per_second)} "
        f"({basis}); the first commit waits for it, later saves only reference "
        f"them. frozen='rebuild' writes none of them (a resume then checks that "
        f"build_model() made the same ones). This upload goes on.",
        seconds,
    )


def rate_text(bytes_per_second: float) -> str:
    """``"850 kB/s"``, ``"2.5 MB/s"``."""
    if bytes_per_second < 1e6:
        return f"{bytes_per_second / 1e3:.0f} kB/s"
    return f"{bytes_per_second / 1e6:.1f} MB/s"


class UploadRate:
    """What a session's uploads moved a second, once they measured enough
    (:data:`MEASURED_SECONDS`)."""

    def __init__(self) -> None:
        self._bytes = 0
        self._seconds = 0.0

    def record(self, nbytes: int, seconds: float) -> None:
        """Count one upload of ``nbytes`` that took ``seconds``."""
        if nbytes > 0 and seconds > 0:
            self._bytes += nbytes
            self._seconds += seconds

    @property
    def bytes_per_second(self) -> float | None:
        if self._seconds < MEASURED_SECONDS:
            return None
        return self._bytes / self._seconds


class DailyUploads:
    """A session's uploads against its store's daily cap, warned about once.

    Args:
        cap: the store's daily upload allowance in bytes (None: no cap).
        frozen: the ``frozen`` setting, for the fix the warning names.
    """

    def __init__(self, cap: float | None, frozen: str) -> None:
        self.cap = cap
        self.frozen = frozen
        self._commits: list[tuple[float, int]] = []
        self._warned = False

    def record(self, now: float, uploaded: int) -> tuple[str, float] | None:
        """Count a commit; the warning and the bytes a day, the first time the
        steady rate reaches :data:`CAP_WARN_SHARE` of the cap.

        The session's first commit is left out of the rate: it uploads what
        later ones only reference (the frozen arrays), and when it comes
        says nothing of the cadence.
        """
        self._commits.append((now, uploaded))
        if not self.cap or self._warned or len(self._commits) < 3:
            return None
        first, last = self._commits[0][0], self._commits[-1][0]
        if last <= first:
            return None
        steady = sum(size for _, size in self._commits[1:])
        per_day = steady / (last - first) * DAY_SECONDS
        if per_day < CAP_WARN_SHARE * self.cap:
            return None
        self._warned = True
        hint = (
            "frozen='once' (the default) would upload only what trains"
            if self.frozen == "every"
            else "the checkpoints hold only what trains already"
        )
        return (
            f"at this cadence the run uploads about {per_day / 1e9:.1f} GB a day, "
            f"{per_day / self.cap:.0%} of the store's daily upload cap of "
            f"{self.cap / 1e9:.0f} GB per user: past it, uploads fail until the "
            f"next day. Save less often (save_every='auto' stays within it); "
            f"{hint}.",
            per_day,
        )
