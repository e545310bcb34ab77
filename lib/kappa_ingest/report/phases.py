"""Where a run's time goes, from the moment its command started to its exit.

A user waits for the whole command, not for the sending stage, so the report's ``wall_s``
starts when the process started (under ``spark-submit``, when the spark-submit process that
launched this Python did) and ``phases`` splits it:

- ``startup``: Python, the JVM and the Spark session (and an embedded broker, started
  alongside them);
- ``setup``: inputs, header, topic, offsets, the Python workers' warm-up;
- ``sending``: the sending stage(s);
- ``reconcile``: the broker's settled offsets, Spark's task records, the checks, quarantine;
- ``recording``: Spark and any embedded broker stopped, the Delta store and summary.json written.

Whatever phase a run fails in takes the time up to its end, and the later ones are zero,
so the phases always add up to ``wall_s``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime

PHASES = ("startup", "setup", "sending", "reconcile", "recording")
LABELS = {"startup": "start-up", "setup": "set-up", "sending": "sending", "reconcile": "reconcile",
          "recording": "recording"}  # fmt: skip
# One colour per phase, the same in the page's phase bar and in the broker figure's band.
COLOURS = {"startup": "#cbd5e0", "setup": "#e2d4b7", "sending": "#9ac3e6", "reconcile": "#c6e2c0",
           "recording": "#e0c6e2"}  # fmt: skip


def started_at(pid: int | str = "self") -> float:
    """Epoch seconds at which process ``pid`` started, from the kernel's own record (10 ms ticks).

    Not psutil's create_time: that adds the boot time rounded to whole seconds, up to a
    second off, which is a lot on a 10-second run.
    """
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    start_ticks = int(fields[19])  # field 22 of proc(5): starttime, counted from ")"'s next field as 3
    return boot_epoch() + start_ticks / os.sysconf("SC_CLK_TCK")


def boot_epoch(tries: int = 5) -> float:
    """The wall-clock time at which the boot clock read zero. The two clocks are read back
    to back, and again if the process was paused between them (a busy machine did so by
    ms), so that a pause there does not move the answer."""
    best_gap, best = float("inf"), 0.0
    for _ in range(tries):
        before = time.clock_gettime(time.CLOCK_BOOTTIME)
        wall = time.time()
        gap = time.clock_gettime(time.CLOCK_BOOTTIME) - before
        if gap < best_gap:
            best_gap, best = gap, wall - (before + gap / 2)
        if gap < 0.0001:
            break
    return best


def process_start() -> float:
    """Epoch seconds at which this command started: this process, or the spark-submit
    process that started it (``spark-submit.sh`` execs into it, so its start is the command's)."""
    pid: int | str = "self"
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit: the JVM is our parent
        try:
            with open(f"/proc/{os.getppid()}/comm") as f:
                if f.read().strip() == "java":
                    pid = os.getppid()
        except OSError:
            pass
    try:
        return started_at(pid)
    except (OSError, IndexError, ValueError):  # no /proc: from here on, then
        return time.time()


class RunClock:
    """Phase boundaries on the wall clock (``now``); ``end(phase)`` marks where a phase ended."""

    def __init__(self, started: float | None = None, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self.started = now() if started is None else started
        self._ends: dict[str, float] = {}

    @classmethod
    def from_process_start(cls) -> RunClock:
        return cls(process_start())

    @property
    def started_at(self) -> datetime:
        return datetime.fromtimestamp(self.started, UTC)

    def end(self, phase: str) -> None:
        """Mark the end of ``phase`` (and of any earlier phase not yet marked) now."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; the phases are {', '.join(PHASES)}")
        now = self._now()
        for name in PHASES[: PHASES.index(phase) + 1]:
            self._ends.setdefault(name, now)

    def phases(self, finished: float) -> dict[str, float]:
        """Seconds per phase up to ``finished``; they add up to ``finished - started``."""
        out: dict[str, float] = {}
        previous = self.started
        for name in PHASES:
            end = min(self._ends.get(name, finished), finished)
            out[f"{name}_s"] = round(max(0.0, end - previous), 3)
            previous = max(previous, end)
        # Rounding each phase may leave a millisecond over or under: the last non-zero phase absorbs it.
        total = round(finished - self.started, 3)
        last = max((k for k, v in out.items() if v), key=list(out).index, default="startup_s")
        out[last] = round(out[last] + total - round(sum(out.values()), 3), 3)
        return out


def iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_time(v: str | datetime | None) -> datetime | None:
    """A time as the report holds it (:func:`iso`'s text, or a datetime read back from the
    Delta tables) as an aware UTC datetime."""
    if v is None or isinstance(v, datetime):
        return v if v is None or v.tzinfo else v.replace(tzinfo=UTC)
    return datetime.fromisoformat(v.replace("Z", "+00:00"))
