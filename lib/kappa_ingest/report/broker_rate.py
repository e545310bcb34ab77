"""The broker-side ingest rate: the topic's summed end offsets, read once a second by the
driver while a run sends, and the one-minute rate that Kafka's own ``MessagesInPerSec``
meter reports (the KPI of Hesse et al.).

Kafka's meter (Yammer's ``Meter``) ticks every 5 seconds: the messages counted since the
last tick give an instant rate, and the one-minute rate moves toward it by
``alpha = 1 - exp(-5 / 60)``; the first tick sets it outright. Between ticks it holds.
:class:`OneMinuteRate` does exactly that on the sampled offsets.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kappa_ingest.kafka.topics import Admin

TICK_S = 5
ALPHA = 1 - math.exp(-TICK_S / 60)
SAMPLE_TIMEOUT_S = 2.0  # a sample that takes longer is missed, not waited for
# The one-minute rate starts from the first tick's 5-second rate (start-up included) and
# forgets it with a 60 s time constant: after 3 of them what is left of it is under 5%.
WARM_S = 180


class OneMinuteRate:
    """Kafka's one-minute exponentially weighted moving rate, fed message counts."""

    def __init__(self) -> None:
        self.rate: float | None = None
        self._uncounted = 0

    def update(self, n: int) -> None:
        self._uncounted += n

    def tick(self) -> None:
        instant = self._uncounted / TICK_S
        self._uncounted = 0
        self.rate = instant if self.rate is None else self.rate + ALPHA * (instant - self.rate)

    @property
    def value(self) -> float:
        return self.rate or 0.0


def seconds_sampled(points: list[dict[str, Any]]) -> float:
    """The span of a run's broker samples (``t``: datetimes or ISO strings), first to last:
    a missed sample leaves a gap in the curve, not a shorter clock."""
    if len(points) < 2:
        return 0.0
    from kappa_ingest.report.phases import parse_time

    return (parse_time(points[-1]["t"]) - parse_time(points[0]["t"])).total_seconds()


def warming_up(seconds_sampled: float) -> bool:
    """Whether a one-minute rate after ``seconds_sampled`` seconds still mostly shows its start:
    Kafka's figure, faithful to Kafka, but not the run's rate."""
    return seconds_sampled < WARM_S


def one_minute_rates(offsets: list[int]) -> list[float]:
    """The meter's value at each one-second sample of cumulative offsets (sample 0 is the start)."""
    meter = OneMinuteRate()
    out = [0.0]
    for i in range(1, len(offsets)):
        meter.update(offsets[i] - offsets[i - 1])
        if i % TICK_S == 0:
            meter.tick()
        out.append(round(meter.value, 1))
    return out


@dataclass
class BrokerRateSampler:
    """Samples ``topic``'s summed end offsets once a second on a background thread."""

    bootstrap_servers: str
    topic: str
    settings: dict[str, str] | None = None
    interval_s: float = 1.0
    # Called after each sample with (records since the start, this second's rate, one-minute rate).
    on_sample: Callable[[int, float, float], None] | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)  # (epoch seconds, offsets total)
    readings: list[int] = field(default_factory=list)  # the offsets totals its own client read
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    # Who closes the admin: the thread if stop() gave up waiting for it, else stop().
    _handoff: threading.Lock = field(default_factory=threading.Lock)
    _finished: bool = False
    _abandoned: bool = False

    def start(self, first: dict[int, int] | None = None) -> BrokerRateSampler:
        """Sample from now on; ``first``: the run's end offsets before it (the first sample, not
        asked again: the curve then starts where the run did)."""
        self._admin = Admin(self.bootstrap_servers, self.settings, timeout_s=SAMPLE_TIMEOUT_S)
        self._meter = OneMinuteRate()
        self._partitions = len(first) if first else None
        self._at_once = first is not None  # its own client's first reading: at once, on its thread
        try:
            if first is not None:
                self.samples.append((time.time(), sum(first.values())))
            else:
                self._sample()
        except BaseException:
            self._admin.close()
            raise
        self._ticked = self.samples[0][1]
        self._thread = threading.Thread(target=self._run, name="broker-rate", daemon=True)
        self._thread.start()
        return self

    def _sample(self, own: bool = False) -> None:
        total = sum(self._admin.end_offsets(self.topic, SAMPLE_TIMEOUT_S, self._partitions).values())
        if own and self._stop.is_set():
            # Answered after ``halt``: it may have read past the run's settled offsets (other
            # producers' records), which are read only after ``halt``. One answered before
            # it read no further than they do.
            return
        self.samples.append((time.time(), total))
        self.readings.append(total)
        if self.on_sample is not None and len(self.samples) > 1:
            (_, first), (t1, prev), (t2, now) = self.samples[0], self.samples[-2], self.samples[-1]
            if len(self.samples) % TICK_S == 1:  # the meter ticks every five samples
                self._meter.update(now - self._ticked)
                self._meter.tick()
                self._ticked = now
            self.on_sample(now - first, (now - prev) / max(t2 - t1, 1e-3), self._meter.value)

    def _run(self) -> None:
        if self._at_once:
            try:
                self._sample(own=True)
            except Exception:  # noqa: BLE001 - see below
                pass
        next_at = self.samples[0][0] + self.interval_s
        while not self._stop.wait(max(0.0, next_at - time.time())):
            try:
                self._sample(own=True)
            except Exception:  # noqa: BLE001 - a missed sample is not a failed run; the next one counts
                pass
            next_at += self.interval_s
        with self._handoff:
            self._finished = True
            if self._abandoned:
                self._admin.close()

    def halt(self) -> None:
        """Read no more on its own thread. Called before the run's settled offsets are read, so
        that every reading of its own lies within them, whoever else writes to the topic."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(SAMPLE_TIMEOUT_S + 1)
            with self._handoff:
                if not self._finished:  # still inside a query: it closes the admin itself when it ends
                    self._abandoned = True

    def stop(self, last: dict[int, int] | None = None) -> list[dict[str, Any]]:
        """Take a last sample (``last``, the end offsets just read, if given) and return the
        curve: ``t, offsets_total, messages_per_s, one_minute_rate``.

        The last sample is taken only once the thread has ended (they share one consumer),
        and a broker that no longer answers ends the curve at its last sample instead of
        failing the run: the run's own error, if any, is the one to report."""
        self.halt()
        if last is not None:  # read by the run: no client needed
            self.samples.append((time.time(), sum(last.values())))
        if self._abandoned:  # its client is the thread's to close
            return curve(self.samples)
        try:
            if last is None:
                self._sample()
        except Exception:  # noqa: BLE001 - see above
            pass
        finally:
            self._admin.close()
        return curve(self.samples)


def curve(samples: list[tuple[float, int]]) -> list[dict[str, Any]]:
    from datetime import UTC, datetime

    from kappa_ingest.report.phases import iso

    offsets = [o for _, o in samples]
    ewma = one_minute_rates(offsets)
    out = []
    for i, (t, total) in enumerate(samples):
        dt = t - samples[i - 1][0] if i else 0.0
        rate = (total - offsets[i - 1]) / dt if i and dt > 0 else 0.0
        out.append({"t": iso(datetime.fromtimestamp(t, UTC)), "offsets_total": total,
                    "messages_per_s": round(rate, 1), "one_minute_rate": ewma[i]})  # fmt: skip
    return out


def figures(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Peak per-second rate, steady rate (median of the middle 80% of the sending seconds),
    their spread, and the time from the first sample to the first record."""
    rates = [p["messages_per_s"] for p in points[1:]]
    base = points[0]["offsets_total"] if points else 0
    first = next((i for i, p in enumerate(points) if p["offsets_total"] > base), None)
    last = max((i for i, p in enumerate(points) if i and p["messages_per_s"] > 0), default=None)
    sending = rates[first - 1 : last] if first is not None and last is not None else []
    cut = len(sending) // 10
    middle = sending[cut : len(sending) - cut] if len(sending) > 2 * cut else sending
    steady = statistics.median(middle) if middle else 0.0
    spread = (statistics.pstdev(middle) / steady) if middle and steady else None
    return {
        "peak_messages_per_s": max(rates, default=0.0),
        "steady_messages_per_s": round(steady, 1),
        "steady_spread": round(spread, 3) if spread is not None else None,
        "time_to_first_record_s": float(first) if first is not None else None,
        "samples": len(points),
    }
