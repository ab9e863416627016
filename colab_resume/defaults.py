"""Every default a user can change, in one place.

Each option class (``AgentOptions``, ``SessionOptions``, ``TriggerOptions``,
``CheckpointConfig``, ``RetryPolicy``) and each reader (liveness) takes its
default from here, so a value changed once changes everywhere it is used
and the docs can name one source. Constants only: this module imports
nothing.
"""

from __future__ import annotations

# Heartbeats: one beat every HEARTBEAT_SECONDS; a holder silent for
# BEATS_BEFORE_DEAD beats is dead (a rerun on a new VM waits at most 40 s).
HEARTBEAT_SECONDS = 10.0
BEATS_BEFORE_DEAD = 4
# On Google Drive a beat every DRIVE_HEARTBEAT_SECONDS (a store's own pace,
# read by the Agent when heartbeat_seconds is not given). A beat is one
# content update of the heartbeat file plus the fence check (~3 requests):
# 2,880 beats and ~9,000 requests a day, about 6 a minute (Drive's request
# quotas, counted in quota units: docs/guide/drive.md); each beat is a
# revision of a ~1 KB file, and Drive keeps at most 100 of a file's
# revisions, so at this pace the heartbeat file holds under an hour of
# them (~100 KB). A rerun
# on a new VM waits at most 4 beats (2 min) after a silent death.
DRIVE_HEARTBEAT_SECONDS = 30.0
# Drive lets one user upload 750 GB a day; save_every="auto" takes at most
# half of it.
DRIVE_DAILY_UPLOAD_BYTES = 750e9
# One upload stream to Drive moves a few MB/s; a save's parallel uploads
# add up (bench/bench_transfers.py: 4 streams, 3.1x one). What estimates a
# first save's upload before it starts (checkpoint/upload_notes.py).
DRIVE_UPLOAD_STREAM_BYTES_PER_SECOND = 2.5e6
# Training whose step has not moved for this long (while beating) is STALLED.
STALL_AFTER_SECONDS = 600.0
# A holder whose lease is unreadable (damage) promised nothing readable:
# the old default's 4 beats of 30 s, longer than today's, since the holder
# may be an older version that beats that slowly.
UNREADABLE_LEASE_DEAD_AFTER_SECONDS = 120.0

# Checkpoints: a save every SAVE_EVERY_SECONDS (and/or every N steps, no
# default), the newest KEEP committed kept.
SAVE_EVERY_SECONDS = 600.0
KEEP = 3
# save_every="auto" (colab_resume/checkpoint/cadence.py): the interval stays
# between the floor and the ceiling, and until failures are seen assumes
# one per PRIOR_BETWEEN_FAILURES_SECONDS of training (a free Colab session
# rarely lasts much longer unattended).
AUTO_SAVE_FLOOR_SECONDS = 30.0
AUTO_SAVE_CEILING_SECONDS = 3600.0
PRIOR_BETWEEN_FAILURES_SECONDS = 3600.0
# ...weighing as a tenth of a failure seen (colab_resume/checkpoint/cadence.py).
PRIOR_WEIGHT_FAILURES = 0.1

# Storage: a transient fault is retried this long before the call fails.
STORAGE_RETRY_SECONDS = 120.0
