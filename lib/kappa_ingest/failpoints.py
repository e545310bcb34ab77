"""Fault injection for the fault tests: a task held at a named point of its transaction
while the test breaks something there (kills the executor, pauses the coordinator), or
the driver held before it reads the topic back (while the test takes records away).

Off unless ``KAPPA_INGEST_HOLD_AT=<point>[,<point>...]:<dir>`` is in the task's environment
(executors inherit it from the driver's on a local master). At ``point`` the task writes
``<dir>/<name>.<point>`` and waits while that file exists, ten minutes at most; the test
deletes it to let the task go on. A run without the variable pays one lookup per unit.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "KAPPA_INGEST_HOLD_AT"
OPENING = "opening"  # a unit's producer opened ahead on its thread, its id not yet initialised
MID_SEND = "mid-send"  # a transaction's first records at the broker (flushed), the transaction open
BEFORE_COMMIT = "before-commit"
COMMIT_RETRY = "commit-retry"  # a commit timed out (retriable), about to be called again
AFTER_COMMIT = "after-commit"
BEFORE_RECONCILE = "before-reconcile"  # the driver, its offsets after the send read, its checks not made
WATCH_PASSED = "watch-passed"  # a watch's first start, the files there passed over, the start not yet recorded
WATCH_CHOSEN = "watch-chosen"  # a watch's driver, its next batch chosen from a listing, not yet run
WATCH_SENT = "watch-sent"  # a watch's driver, its batch committed, its files not yet cleaned up
LONGEST_S = 600.0


def armed(point: str) -> bool:
    """Whether a task reaching ``point`` will hold there."""
    spec = os.environ.get(ENV)
    return bool(spec) and point in spec.partition(":")[0].split(",")


def hold(point: str, name: str) -> None:
    if not armed(point):
        return
    directory = os.environ[ENV].partition(":")[2]
    marker = Path(directory) / f"{name.replace('/', '_')}.{point}"
    # Whole or not at all: a test polling the directory reads the PID the moment the name appears.
    partial = marker.with_name(f".{marker.name}.{os.getpid()}")
    partial.write_text(str(os.getpid()))
    partial.rename(marker)
    deadline = time.monotonic() + LONGEST_S
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
