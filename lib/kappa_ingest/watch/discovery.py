"""When to look at a landing again, and what is ready there.

A local landing is watched with inotify (through watchdog): any change in the directory
wakes the watch at once. It is also listed in full every ``period_s``, which catches what
notifications miss (an overflowed queue, a network filesystem, a directory replaced). An
``s3://`` prefix has no notifications: it is listed every ``period_s``. A file seen but not
yet still for ``min_age_s`` is looked at again the moment it would be.

Notifications only spare waiting: what is ready is always what a full listing says.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from collections.abc import Callable

from kappa_ingest.s3.access import S3Access, is_s3
from kappa_ingest.watch.landing import Landed, Settling, list_landed

READS = ("opened", "closed_no_write")  # events of files read, not changed: no reason to list again
# A notification's burst: over once nothing happened for QUIET_S; listed after BURST_S at the latest.
QUIET_S, BURST_S = 0.05, 1.0


class Discovery:
    def __init__(self, where: str, min_age_s: float, period_s: float, access: S3Access | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.where, self.access, self.period_s, self.clock = where, access, period_s, clock
        self.settling = Settling(min_age_s)
        self._nudged = threading.Event()
        self._observer = None
        self._woken = False
        self._returned: frozenset = frozenset()  # the files the last ready() returned, with their identities
        self.listings = 0  # full listings made (what a notification saves is waiting, not listing)

    def __enter__(self) -> Discovery:
        if not is_s3(self.where):
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer

            nudge = self._nudged

            class Nudge(FileSystemEventHandler):
                def on_any_event(self, event: object) -> None:
                    if getattr(event, "event_type", "") not in READS:  # a batch reading its files
                        nudge.set()

            directory, deep = _watched(self.where)
            self._observer = Observer()
            self._observer.schedule(Nudge(), directory, recursive=deep)
            self._observer.daemon = True
            self._observer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

    def wake(self) -> None:
        """End a wait in :meth:`ready` now, and every later one at once (the watch is stopping)."""
        self._woken = True
        self._nudged.set()

    def ready(self, wait_s: float, changed: bool = False) -> list[Landed]:
        """The files ready, as soon as some are, waiting at most ``wait_s`` (then none). The
        landing is listed now, then again at a notification, when a file seen would have
        been still long enough, and every ``period_s``. ``changed``: only once they differ
        from the files this returned last (the caller had nothing to do with those: sent
        and kept, or refused)."""
        deadline = self.clock() + wait_s
        while True:
            now = self.clock()
            self._nudged.clear()
            ready = self.settling.ready(list_landed(self.where, self.access), now, time.time())
            self.listings += 1
            seen = frozenset((f.path, f.identity()) for f in ready)
            if ready and not (changed and seen == self._returned):
                self._returned = seen
                return ready
            due = [now + self.settling.min_age_s - still for _, still in self.settling.waiting(now)]
            wake = min([deadline, now + self.period_s, *due])
            if self._nudged.wait(max(0.0, wake - now)):
                if self._woken:
                    return []
                self._quiet()
                continue
            if self.clock() >= deadline:
                return []

    def _quiet(self) -> None:
        """After a notification, wait until the landing has been quiet for ``QUIET_S`` (at
        most ``BURST_S``): a burst of renames (a backlog moved in at once) is listed once it
        is over, as one batch, not as its first few files and then the rest."""
        end = time.monotonic() + BURST_S
        while not self._woken:
            self._nudged.clear()
            left = end - time.monotonic()
            if left <= 0 or not self._nudged.wait(min(QUIET_S, left)):
                return


def _watched(where: str) -> tuple[str, bool]:
    """The directory to be notified of, and whether below it too (a glob across directories)."""
    local = where.removeprefix("file://")
    if not glob.has_magic(local):
        return local, False
    first = min(i for i, c in enumerate(local) if c in "*?[")
    base = local[: local.rfind("/", 0, first) + 1] or "."
    return os.path.normpath(base), "/" in local[len(base) :]
