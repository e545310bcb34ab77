"""The throttle (--target-rate) and the pacer (--replay-speed), against a clock the test
moves: never faster than asked, every row released, each record no earlier than its time."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pytest

from kappa_ingest.sinks import partition_runner
from kappa_ingest.sinks.partition_runner import Pacer, Throttle


class Clock:
    """time.monotonic, time.time and time.sleep for the runner: a sleep moves the clock on."""

    def __init__(self, at: float) -> None:
        self.at = at

    def now(self) -> float:
        return self.at

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.at += s


@dataclass
class Batch:
    """What the throttle and the pacer read of an encoded batch."""

    rows: int
    timestamps_ms: pa.Array


@pytest.fixture
def clock(monkeypatch):
    c = Clock(1_000.0)
    monkeypatch.setattr(partition_runner.time, "monotonic", c.now)
    monkeypatch.setattr(partition_runner.time, "time", c.now)
    monkeypatch.setattr(partition_runner.time, "sleep", c.sleep)
    return c


def test_the_throttle_never_sends_faster_than_its_rate_and_holds_nothing_back(clock):
    rate, step = 1_000.0, 50  # a twentieth of a second's rows per slice
    throttle = Throttle(rate)
    released: list[tuple[float, int]] = []  # (when, rows released so far)
    total = 0
    for n in (300, 7, 1_000, 493, 1_200):  # batches as the parser makes them
        for lo, hi in throttle.slices(Batch(n, pa.array([0] * n))):
            assert 0 <= lo < hi <= n
            total += hi - lo
            released.append((clock.at, total))
            clock.at += 0.001  # sending the slice takes a moment
    assert total == 3_000
    start = released[0][0]
    for i, (t, done) in enumerate(released):
        assert done <= rate * (t - start) + step + 1e-6, (t - start, done)  # never ahead of the rate
        for t0, done0 in released[:i]:
            assert done - done0 <= rate * (t - t0) + step + 1e-6
    assert released[-1][0] - start >= (3_000 - step) / rate  # so the whole took at least that long
    assert Throttle(None).slices(Batch(5, pa.array([0] * 5))).__next__() == (0, 5)  # unthrottled: at once


def test_the_pacer_releases_each_record_at_its_event_time_over_the_speed(clock):
    first_ms, speed = 5_000_000, 2.0
    anchor_ms = int(clock.at * 1000) + 1_000
    events = [first_ms + 37 * i + (i % 5) * 11 for i in range(400)]  # rows sorted by event time
    pacer = Pacer(first_ms, speed, anchor_ms)
    released = 0
    for lo in range(0, 400, 130):
        stamps = pa.array(events[lo : lo + 130], pa.int64())
        for a, b in pacer.slices(Batch(len(stamps), stamps)):
            now_ms = clock.at * 1000
            due = [anchor_ms + (e - first_ms) / speed for e in stamps.to_pylist()[a:b]]
            assert due[0] <= now_ms + 1e-6, "a record released before its time"
            assert max(due) <= now_ms + 50, "a record released more than a slice early"
            released += b - a
    assert released == 400
    assert clock.at * 1000 >= anchor_ms + (events[-1] - first_ms) / speed - 50  # the replay spans the events
