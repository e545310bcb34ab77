"""The bench's CPU per row by process in the sending window on the broker's clock (issue
32): a real child process's CPU read over time and charged to a window, the window found in
the topic's offsets, and the table of what a contestant spends beyond the ceiling."""

from __future__ import annotations

import calendar
import os
import subprocess
import sys

import pytest

from kappa_ingest.bench.broker_clock import sending_window
from kappa_ingest.bench.contestants import AT_BASELINE, BASELINE, PLAIN_LINE_PATH
from kappa_ingest.bench.links import IDLE, LinkRun, _cpu_table, _ratios, _sending_window
from kappa_ingest.bench.monitor import (
    BROKER,
    DRIVER_PYTHON,
    EXECUTOR_JVM,
    LIBRDKAFKA,
    OTHER,
    PRODUCER_JVM,
    PYTHON_WORKERS,
    SPARK_JVM,
    process_group,
    run_measured,
)
from kappa_ingest.bench.runner import RunResult, checks, markdown, regressed, round_order, summarise

# Sleeps 1 s, then spins 1 s of CPU, then sleeps 1 s: the spin is charged to its window alone.
SPIN = "import time; time.sleep(1); t = time.process_time(); exec('while time.process_time() - t < 1: pass'); time.sleep(1)"


def test_a_python_process_under_the_command_is_a_worker_whatever_its_command_line():
    """(A worker of the event-time path showed an empty command line: its CPU fell in "other".)"""
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', " + repr(SPIN) + "])"
    usage = run_measured([sys.executable, "-c", code])
    assert set(usage.timeline.groups.values()) == {DRIVER_PYTHON, PYTHON_WORKERS}
    times = usage.timeline.times
    assert usage.timeline.between(times[0], times[-1])[PYTHON_WORKERS] == pytest.approx(1.0, abs=0.3)


def test_a_child_s_cpu_is_charged_to_the_window_it_was_spent_in():
    usage = run_measured([sys.executable, "-c", SPIN])
    assert usage.returncode == 0 and usage.cpu_s == pytest.approx(1.0, abs=0.3)
    times = usage.timeline.times
    start, end = times[0], times[-1]
    assert usage.timeline.between(start, start + 0.8)[DRIVER_PYTHON] < 0.15  # its first second: asleep
    assert usage.timeline.between(start + 0.8, end - 0.8)[DRIVER_PYTHON] == pytest.approx(1.0, abs=0.25)
    assert usage.timeline.between(end - 0.8, end)[DRIVER_PYTHON] < 0.15


def test_cpu_spent_beside_the_command_is_the_machine_s_not_the_command_s():
    """A process outside the command's tree spinning at the same time: the machine's busy
    CPU holds both spins, the command's groups only its own."""
    beside = subprocess.Popen([sys.executable, "-c", SPIN.replace("time.sleep(1)", "time.sleep(0.5)", 1)])
    try:
        usage = run_measured([sys.executable, "-c", SPIN])
    finally:
        beside.wait(10)
    times = usage.timeline.times
    spent = usage.timeline.between(times[0], times[-1])
    busy, _ = usage.timeline.machine_between(times[0], times[-1])
    assert spent == {DRIVER_PYTHON: pytest.approx(1.0, abs=0.3)}
    assert busy - sum(spent.values()) >= 0.7


# A thread named as librdkafka names its own spins 1 s and ends; the process spins 0.5 s more
# on its main thread, then sleeps: each is charged to its own group, the ended thread's too.
RDK_THREAD = """
import ctypes, threading, time
def rdk():
    ctypes.CDLL(None).prctl(15, b"rdk:broker1", 0, 0, 0)  # PR_SET_NAME
    t = time.thread_time()
    while time.thread_time() - t < 1: pass
th = threading.Thread(target=rdk); th.start(); th.join()
t = time.thread_time()
while time.thread_time() - t < 0.5: pass
time.sleep(1)
"""


def test_a_worker_s_librdkafka_threads_are_told_apart_even_once_ended():
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', " + repr(RDK_THREAD) + "])"
    usage = run_measured([sys.executable, "-c", code], threads=True)
    times = usage.timeline.times
    spent = usage.timeline.between(times[0], times[-1])
    assert spent[LIBRDKAFKA] == pytest.approx(1.0, abs=0.25)
    assert spent[PYTHON_WORKERS] == pytest.approx(0.5, abs=0.25)


# Spins 0.6 s of CPU in a child; once it has ended, the kernel is told to give its pid to the
# next process (ns_last_pid: the suite runs as root), and a second child spins 0.6 s under it.
# The kernel's pid counter is put back after, so that no pid freed meanwhile is given again soon.
PID_AGAIN = """
import subprocess, sys
LAST = "/proc/sys/kernel/ns_last_pid"
SPIN = "import time; t = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"
counter = int(open(LAST).read())
first = subprocess.Popen([sys.executable, "-c", SPIN])
first.wait()
try:
    for _ in range(20):  # another process may take the pid first: bounded tries
        with open(LAST, "w") as f:
            f.write(str(first.pid - 1))
        second = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(1)\\n" + SPIN],
                                  stdin=subprocess.PIPE)
        if second.pid == first.pid:
            break
        second.kill(); second.wait()
finally:
    with open(LAST, "w") as f:
        f.write(str(max(counter, int(open(LAST).read()))))
second.communicate(b"go")
print(second.pid == first.pid)
"""


def test_a_pid_given_again_to_another_process_keeps_both_processes_cpu():
    """(Keyed by pid alone, the second spin's readings replaced the first's: 0.6 s, not 1.2.)"""
    assert os.access("/proc/sys/kernel/ns_last_pid", os.W_OK), "this test gives a pid again: it needs root"
    usage = run_measured([sys.executable, "-c", PID_AGAIN])
    assert usage.returncode == 0 and usage.stdout.split() == ["True"], usage.stderr
    times = usage.timeline.times
    assert usage.timeline.between(times[0], times[-1])[PYTHON_WORKERS] == pytest.approx(1.2, abs=0.3)
    assert usage.cpu_s == pytest.approx(1.2, abs=0.3)


def _link_run(link: str, repeat: int, workers: float, rdk: float) -> LinkRun:
    return LinkRun(link, 0.0 if link == "unshaped" else 100.0, None if link == "unshaped" else "1gbit", "kappa", repeat,
                   100, 100, 1.0, 2.0, 100.0, 50.0, 270.0, None,
                   {PYTHON_WORKERS: workers, LIBRDKAFKA: rdk, BROKER: 1.0, IDLE: 0.5}, {LIBRDKAFKA: rdk})  # fmt: skip


def test_the_links_table_shows_each_group_s_cpu_beside_the_same_contestant_unshaped():
    runs = [_link_run("unshaped", i, w, 1.0) for i, w in enumerate([4.0, 5.0, 9.0])]
    runs += [_link_run("100 ms, 1gbit", i, w, 2.5) for i, w in enumerate([5.0, 5.5, 6.0])]
    table = _ratios(runs)
    assert table[0]["cpu_s"] == {PYTHON_WORKERS: 5.0, LIBRDKAFKA: 1.0, BROKER: 1.0, IDLE: 0.5}
    assert table[1]["sending_cpu_s"] == {LIBRDKAFKA: 2.5}
    lines = _cpu_table(table, "cpu_s", "command to exit")
    assert lines[1] == "CPU seconds by process, command to exit (medians; in brackets: more than unshaped)"
    assert lines[3] == "| link | contestant | Python workers | librdkafka threads | broker | idle |"
    assert lines[5] == "| unshaped | kappa | 5.00 | 1.00 | 1.00 | 0.50 |"
    assert lines[6] == "| 100 ms, 1gbit | kappa | 5.50 (+0.50) | 2.50 (+1.50) | 1.00 (+0.00) | 0.50 (+0.00) |"


def test_the_sending_window_is_the_sending_stages_as_the_report_has_them():
    """From the first sending stage's submission to the last's completion, in epoch seconds
    (the report's UTC times, read independently here by calendar.timegm); a stage not
    sending, or without its times, left out."""
    stages = [{"sends": False, "submitted_at": "2026-11-29T06:12:10.000Z", "completed_at": "2026-11-29T06:12:11.000Z"},
              {"sends": True, "submitted_at": "2026-11-29T06:12:17.665Z", "completed_at": "2026-11-29T06:12:23.356Z"},
              {"sends": True, "submitted_at": "2026-11-29T06:12:20.000Z", "completed_at": None}]  # fmt: skip
    at = calendar.timegm((2026, 11, 29, 6, 12, 0, 0, 0, 0))
    assert _sending_window({"stages": stages}) == pytest.approx((at + 17.665, at + 23.356))
    assert _sending_window({"stages": stages[:1]}) is None


@pytest.mark.parametrize(
    ("cmdline", "group"),
    [
        (["/usr/bin/java", "-cp", "x", "kafka.Kafka", "server.properties"], BROKER),
        (["java", "-cp", "x", "org.apache.kafka.tools.ProducerPerformance", "--topic", "t"], PRODUCER_JVM),
        (["/usr/lib/jvm/bin/java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit", "pyspark-shell"], SPARK_JVM),
        (["java", "org.apache.spark.executor.CoarseGrainedExecutorBackend", "--driver-url", "x"], EXECUTOR_JVM),
        (["/work/.venv/bin/python", "-m", "pyspark.daemon"], PYTHON_WORKERS),
        (["/work/.venv/bin/python", "-m", "kappa_ingest.spark.worker_daemon"], PYTHON_WORKERS),
        (["/work/.venv/bin/python", "/work/.venv/bin/kappa-ingest", "ingest", "--input", "x"], DRIVER_PYTHON),
        (["kcat", "-P", "-b", "x"], OTHER),
        # The launcher, before it execs the JVM, names the workers' module in its arguments.
        (["bash", "spark-submit", "--conf", "spark.python.daemon.module=kappa_ingest.spark.worker_daemon"], OTHER),
        (["java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit", "--conf", "a=worker_daemon", "x"], SPARK_JVM),
    ],
)
def test_processes_are_told_apart_by_their_command_lines(cmdline, group):
    assert process_group(cmdline) == group


def test_the_window_runs_from_the_last_reading_before_the_first_record_to_the_first_with_all():
    readings = [(0.0, 100), (0.1, 100), (0.2, 150), (0.3, 900), (0.4, 1100), (0.5, 1100)]
    assert sending_window(readings, 100, 1100) == (0.1, 0.4)
    assert sending_window(readings, 100, 1200) is None  # never all in
    assert sending_window(readings[2:], 100, 1100) is None  # the start not seen


def _run(name: str, kind: str, window_s: float, us: dict[str, float], i: int) -> RunResult:
    rows = 1_000_000
    return RunResult("wide30", rows, name, kind, i, rows, rows, window_s, 5.0, 20.0, rows / window_s, 50.0, 300.0,
                     20.0, 3.0, 1500.0, window_s, rows / window_s, us)  # fmt: skip


def test_a_contestant_s_cpu_beyond_the_ceiling_is_told_by_process():
    results = [
        *(_run("ceiling: ProducerPerformance", "ceiling", 3.0, {BROKER: 2.0, PRODUCER_JVM: 4.0}, i) for i in range(3)),
        *(_run("kappa-ingest confluent exactly-once", "kappa-ingest", w, {BROKER: 2.5, PYTHON_WORKERS: p, SPARK_JVM: 1.0}, i)
          for i, (w, p) in enumerate([(5.0, 6.0), (4.0, 5.0), (6.0, 7.0)])),
    ]  # fmt: skip
    summary = summarise(results)
    mine = next(r for r in summary if r["kind"] == "kappa-ingest")
    assert mine["window_us_per_row"] == {BROKER: 2.5, PYTHON_WORKERS: 6.0, SPARK_JVM: 1.0, "total": 9.5}
    assert mine["x_ceiling_broker_clock"] == pytest.approx(0.6)  # 200,000 / 333,333 rows/s
    assert mine["us_per_row_beyond_ceiling"] == {BROKER: 0.5, PRODUCER_JVM: -4.0, PYTHON_WORKERS: 6.0,
                                                 SPARK_JVM: 1.0, "total": 3.5}  # fmt: skip
    table = markdown(summary, {"command": "x", "started_at": "now", "machine": "2 cores"})
    assert "| wide30 | 1,000,000 | kappa-ingest confluent exactly-once | 200,000 | 0.60 |" in table
    assert "9.50 [+3.50] |" in table


@pytest.mark.parametrize(("today", "fails"), [(5.4, False), (5.6, True)])
def test_the_line_path_s_cpu_a_row_grown_past_10_percent_of_the_baseline_s_fails_the_bench(today, fails):
    results = [
        *(_run("ceiling: ProducerPerformance", "ceiling", 3.0, {BROKER: 1.0, PRODUCER_JVM: 3.0}, i) for i in range(3)),
        *(_run(BASELINE, "kappa-ingest", 4.0, {PYTHON_WORKERS: 4.0, BROKER: 1.0}, i) for i in range(3)),
        *(_run(PLAIN_LINE_PATH, "kappa-ingest", 4.0, {PYTHON_WORKERS: today - 1.0, BROKER: 1.0}, i) for i in range(3)),
    ]
    found = checks(summarise(results))
    assert [c["measure"] for c in regressed(found)] == (["x_baseline_cpu"] if fails else [])
    beyond = next(c for c in found if c["measure"] == "us_beyond_ceiling")
    assert beyond["value"] == pytest.approx(today - 4.0, abs=0.01) and not beyond["met"]  # wide30's bar: 1.2 µs


def test_the_regression_check_compares_each_round_s_pair_not_the_medians():
    """Each round's pair shares that round's machine (two rounds here twice as dear as the
    first): the check is the median of the rounds' ratios, 1.05x, not the ratio of the
    medians, which pairs runs of different rounds (4.4 against 8: 0.55x)."""
    base, today = [4.0, 8.0, 8.0], [4.2, 8.4, 4.4]
    results = [
        *(_run(BASELINE, "kappa-ingest", 4.0, {PYTHON_WORKERS: c}, i) for i, c in enumerate(base)),
        *(_run(PLAIN_LINE_PATH, "kappa-ingest", 4.0, {PYTHON_WORKERS: c}, i) for i, c in enumerate(today)),
    ]
    row = next(r for r in summarise(results) if r["contestant"] == BASELINE)
    assert row["x_baseline_cpu_rounds"] == [1.05, 1.05, 0.55]
    assert row["x_baseline_cpu"] == 1.05


def test_a_path_against_itself_at_the_baseline_is_reported_not_a_regression_that_fails_the_bench():
    """``--only '<path>' --only '<path> at baseline'``: the path's own CPU a row against
    the baseline commit's, round by round; over 10% is shown as not met, and the bench
    still fails only on the plain line path's."""
    ordered = f"{PLAIN_LINE_PATH} ordered by event time"
    results = [
        *(_run(ordered + AT_BASELINE, "kappa-ingest", 4.0, {PYTHON_WORKERS: 4.0}, i) for i in range(3)),
        *(_run(ordered, "kappa-ingest", 4.0, {PYTHON_WORKERS: 5.0}, i) for i in range(3)),
    ]
    summary = summarise(results)
    found = [c for c in checks(summary) if c["contestant"] == ordered + AT_BASELINE]
    assert [(c["measure"], c["value"], c["met"]) for c in found] == [("x_baseline_cpu", 1.25, False)]
    assert regressed(checks(summary)) == []


def test_a_paths_baseline_runs_only_where_named_whole():
    from kappa_ingest.bench.runner import _selected

    ordered = f"{PLAIN_LINE_PATH} ordered by event time"
    assert not _selected(ordered + AT_BASELINE, ["kappa", "ordered by event time", ordered])
    assert _selected(ordered + AT_BASELINE, [ordered + AT_BASELINE]) and _selected(ordered, ["ordered by event"])
    assert _selected(BASELINE, ["kappa"])  # the plain line path's, as before


def test_rounds_go_forwards_then_backwards():
    names = ["ceiling", "today", "baseline"]
    assert [round_order(names, i) for i in range(3)] == [names, names[::-1], names]


def test_cpu_beyond_the_ceiling_is_each_round_s_difference_not_the_medians():
    """The CPU a row of ProducerPerformance's runs moves from round to round: kappa-ingest's
    run is compared with the ceiling's of its own round (bench-results/20261127T213921Z,
    wide30: +0.63 µs a row so; the medians' difference said +1.74)."""
    ceiling, kappa = [6.82, 4.58, 4.94], [6.68, 5.21, 7.19]
    results = [
        *(_run("ceiling: ProducerPerformance", "ceiling", 3.0, {PRODUCER_JVM: c}, i) for i, c in enumerate(ceiling)),
        *(_run(PLAIN_LINE_PATH, "kappa-ingest", 4.0, {PYTHON_WORKERS: k}, i) for i, k in enumerate(kappa)),
    ]
    summary = summarise(results)
    mine = next(r for r in summary if r["contestant"] == PLAIN_LINE_PATH)
    assert mine["us_beyond_ceiling_rounds"] == [-0.14, 0.63, 2.25]
    assert mine["us_beyond_ceiling"] == mine["us_per_row_beyond_ceiling"]["total"] == 0.63
    beyond = next(c for c in checks(summary) if c["measure"] == "us_beyond_ceiling")
    assert beyond["value"] == 0.63 and beyond["met"]  # wide30's bar: 1.2 µs
