"""The run's clock: phases from the command's start that always add up to wall_s."""

from __future__ import annotations

import time

import psutil
import pytest

from kappa_ingest.report.phases import PHASES, RunClock, started_ago
from kappa_ingest.report.run import RunReport, render


def test_phases_split_the_span_and_add_up():
    clock = RunClock(started=1000.0)
    ends = {"startup": 1004.0, "setup": 1006.5, "sending": 1013.0, "reconcile": 1013.25}
    for name, at in ends.items():
        clock._ends[name] = at
    phases = clock.phases(finished=1013.75)
    assert phases == {"startup_s": 4.0, "setup_s": 2.5, "sending_s": 6.5, "reconcile_s": 0.25, "recording_s": 0.5}
    assert sum(phases.values()) == pytest.approx(13.75)


def test_a_run_failing_in_setup_gives_setup_the_rest():
    clock = RunClock(started=time.time() - 2)
    clock.end("startup")
    time.sleep(0.05)
    clock.end("reconcile")  # what ingest() does on its way out, whatever happened
    phases = clock.phases(finished=time.time())
    assert phases["setup_s"] > 0.04 and phases["sending_s"] == phases["reconcile_s"] == 0.0
    assert sum(phases.values()) == pytest.approx(time.time() - clock.started, abs=0.05)
    with pytest.raises(ValueError, match="the phases are"):
        clock.end("lunch")


def test_report_wall_is_the_phases_sum_and_printed_on_one_line():
    report = RunReport("r", "confluent", "t", {}, clock=RunClock(started=time.time() - 3))
    report.status = "succeeded"
    summary = report.summary()
    assert set(summary["phases"]) == {f"{p}_s" for p in PHASES}
    assert sum(summary["phases"].values()) == pytest.approx(summary["wall_s"], abs=0.002)
    [line] = [ln for ln in render(summary).splitlines() if "phases:" in ln]
    assert "start-up" in line and "recording" in line and "wall" in line


def test_process_start_is_the_kernels_to_the_tick():
    ago = started_ago()
    assert ago > 0
    # psutil rounds the boot time to whole seconds; the kernel's own ticks agree within that.
    assert abs((time.time() - ago) - psutil.Process().create_time()) < 1.05
