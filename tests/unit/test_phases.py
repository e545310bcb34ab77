"""The run's clock: phases from the command's start that always add up to wall_s."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import UTC, datetime

import pytest

from kappa_ingest.report.phases import RunClock, started_at
from kappa_ingest.report.run import RunReport, render


def test_phases_split_the_span_and_add_up():
    clock = RunClock(started=1000.0)
    ends = {"startup": 1004.0, "setup": 1006.5, "sending": 1013.0, "reconcile": 1013.25}
    for name, at in ends.items():
        clock._ends[name] = at
    phases = clock.phases(finished=1013.75)
    assert phases == {"startup_s": 4.0, "setup_s": 2.5, "sending_s": 6.5, "reconcile_s": 0.25, "recording_s": 0.5}
    assert sum(phases.values()) == pytest.approx(13.75)


class Clock:
    """A wall clock the test moves: RunClock's ``now``."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_a_run_failing_in_setup_gives_setup_the_rest():
    now = Clock(1000.0)
    clock = RunClock(started=998.0, now=now)
    clock.end("startup")
    now.at = 1000.05
    clock.end("reconcile")  # what ingest() does on its way out, whatever happened
    phases = clock.phases(finished=1000.3)
    assert phases == {"startup_s": 2.0, "setup_s": 0.05, "sending_s": 0.0, "reconcile_s": 0.0, "recording_s": 0.25}
    assert sum(phases.values()) == pytest.approx(2.3)
    with pytest.raises(ValueError, match="the phases are"):
        clock.end("lunch")


def test_report_wall_is_the_phases_sum_and_printed_on_one_line():
    now = Clock(1000.0)
    report = RunReport("r", "confluent", "t", {}, clock=RunClock(started=997.0, now=now))
    report.clock.end("startup")
    now.at = 1001.25
    report.clock.end("sending")
    report.status, report.finished_at = "succeeded", datetime.fromtimestamp(1003.5, UTC)
    summary = report.summary()
    assert summary["wall_s"] == 6.5 == sum(summary["phases"].values())
    assert summary["phases"] == {"startup_s": 3.0, "setup_s": 1.25, "sending_s": 0.0, "reconcile_s": 2.25,
                                 "recording_s": 0.0}  # fmt: skip
    [line] = [ln for ln in render(summary).splitlines() if "phases:" in ln]
    assert "start-up" in line and "recording" in line and "6.5 s wall" in line


def test_a_process_start_is_the_kernels_to_the_tick():
    """The start time is the kernel's, in its clock ticks: between the moments just before
    and after the process was made. (psutil's is up to a second off: its boot time is rounded.)"""
    before = time.time()
    child = subprocess.Popen(["sleep", "60"])
    after = time.time()
    try:
        start = started_at(child.pid)
    finally:
        child.kill()
        child.wait()
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before - tick <= start <= after + tick, (before, start, after)


def test_a_pause_between_the_two_clocks_readings_does_not_move_the_boot_time(monkeypatch):
    """The first reading is paused 5 ms between the boot clock and the wall clock (as a busy
    machine does); the answer is that of the unpaused reading after it."""
    from kappa_ingest.report import phases

    boot = iter([100.0, 100.005, 200.0, 200.00001])  # pause in the first pair, none in the second
    wall = iter([1_000_100.005, 1_000_200.000005])
    monkeypatch.setattr(phases.time, "clock_gettime", lambda _clock: next(boot))
    monkeypatch.setattr(phases.time, "time", lambda: next(wall))
    assert phases.boot_epoch() == pytest.approx(1_000_000.0, abs=1e-5)
