"""Delivery under real faults: an executor, a broker and the driver killed with ``kill -9``,
a broker paused with SIGSTOP, every broker down; then ``--resume``.

Each test reads the topic back with a ``read_committed`` consumer and compares the exact
multiset of rows with what Python's csv module reads from the input: nothing lost; in
exactly-once mode nothing twice; in at-least-once mode exactly the duplicates the report
counts. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from helpers import consume_all, expected_rows, high_watermarks, rows
from kappa_ingest import datagen, ledger

pytestmark = pytest.mark.integration

ROWS = 40_000


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = datagen.generate("wide30", ROWS, tmp_path_factory.mktemp("faults") / "in.csv", seed=11)
    return path, expected_rows(path)


def cli(*args: str, log: Path) -> subprocess.Popen:
    """``kappa-ingest ingest ARGS`` as its own process (group), output to ``log``."""
    out = open(log, "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "kappa_ingest.cli", "ingest", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )


def wait_for(condition, timeout_s: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the run ended ({proc.returncode}) before {what}:\n{log.read_text()[-3000:] if log else ''}")
        assert time.monotonic() < deadline, f"not {what} within {timeout_s} s"
        time.sleep(0.1)


def sent_so_far(bootstrap: str, topic: str) -> int:
    try:
        return sum(high_watermarks(bootstrap, topic).values())
    except (KeyError, Exception):  # noqa: BLE001 - the topic may not exist yet
        return 0


def _is_executor(p: psutil.Process) -> bool:
    try:
        return any("CoarseGrainedExecutorBackend" in a for a in p.cmdline())
    except psutil.Error:  # gone, or a zombie
        return False


def summary(metrics: Path, run_id: str) -> dict:
    return json.loads((metrics / "runs" / run_id / "summary.json").read_text())


def stop_group(proc: subprocess.Popen) -> None:
    """Whatever a test leaves running of a run (its JVMs, workers) goes, by process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def assert_delivered(records, expected: Counter, report: dict, mode: str) -> None:
    got = rows(records)
    missing = expected - got
    assert not missing, f"{sum(missing.values())} rows lost"
    extra = got - expected
    if mode == "exactly-once":
        assert not extra, f"{sum(extra.values())} rows twice"
        assert report["duplicates"]["count"] == 0
    else:
        assert sum(extra.values()) == report["duplicates"]["count"]
        assert sum(report["duplicates"]["by_file"].values()) == report["duplicates"]["count"]


@pytest.mark.parametrize("mode", ["exactly-once", "at-least-once"])
def test_an_executor_killed_mid_send_is_retried_on_the_other(kafka, tmp_path, data, mode):
    path, expected = data
    topic, run_id, metrics, log = f"executor-kill-{mode}", f"executor-kill-{mode}", tmp_path / "m", tmp_path / "log"
    proc = cli("--input", str(path), "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
               "--master", "local-cluster[2,1,1024]", "--partitions", "4", "--target-rate", "8000",
               "--delivery", mode, "--run-id", run_id, "--metrics-dir", str(metrics), "--quiet", log=log)  # fmt: skip
    try:
        wait_for(lambda: sent_so_far(kafka.bootstrap_servers, topic) >= 4000, 120, "sending", proc, log)
        executors = [p for p in psutil.Process(proc.pid).children(recursive=True) if _is_executor(p)]
        assert len(executors) == 2, executors
        executors[0].kill()
        assert proc.wait(180) == 0, log.read_text()[-3000:]
    finally:
        stop_group(proc)
    report = summary(metrics, run_id)
    assert report["status"] == "succeeded", report["error"]
    assert report["duplicates"]["failed_attempts"], "the kill did not fail a sending task"
    if mode == "exactly-once":
        assert report["delivery"]["transactions_aborted"] >= 1
    assert report["rows_sent"] == ROWS and all(c["ok"] for c in report["checks"]), report["checks"]
    assert_delivered(consume_all(kafka.bootstrap_servers, topic), expected, report, mode)


def committed(bootstrap: str, run_id: str) -> list:
    """The ledger entries of ``run_id``: units it committed (exactly-once) or had acknowledged."""
    return [e for e in ledger.read({"bootstrap.servers": bootstrap}, ledger.DEFAULT_TOPIC) if e.run_id == run_id]


@pytest.mark.parametrize("mode", ["exactly-once", "at-least-once"])
def test_a_driver_killed_mid_run_is_completed_by_resume(kafka, tmp_path, data, mode):
    path, expected = data
    topic, run_id, metrics = f"driver-kill-{mode}", f"driver-kill-{mode}", tmp_path / "m"
    bs = kafka.bootstrap_servers
    proc = cli("--input", str(path), "--topic", topic, "--bootstrap-servers", bs, "--master", "local[2]",
               "--partitions", "4", "--target-rate", "8000", "--delivery", mode, "--run-id", run_id,
               "--metrics-dir", str(metrics), "--quiet", log=tmp_path / "run.log")  # fmt: skip
    try:
        # Killed once the first two tasks are in the ledger and the next two have sent rows of their own.
        def half_way() -> bool:
            done = committed(bs, run_id)
            return len(done) >= 2 and sent_so_far(bs, topic) > sum(e.rows_sent for e in done) + 2000

        wait_for(half_way, 120, "half way", proc, tmp_path / "run.log")
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        _, alive = psutil.wait_procs(children, timeout=30)  # the JVM ends with its driver, the workers with it
        assert not alive, f"left running after the driver was killed: {alive}"
    finally:
        stop_group(proc)
    killed = summary(metrics, run_id)
    assert killed["status"] == "running" and killed["plan"]  # it wrote its plan before sending, then died
    resumed = cli("--resume", run_id, "--metrics-dir", str(metrics), "--run-id", f"{run_id}-2", "--quiet",
                  log=tmp_path / "resume.log")  # fmt: skip
    try:
        assert resumed.wait(180) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    finally:
        stop_group(resumed)
    report = summary(metrics, f"{run_id}-2")
    d = report["delivery"]
    assert report["status"] == "succeeded" and d["resumed_from"] == run_id and d["mode"] == mode, report["error"]
    assert d["splits_skipped"] >= 2 and report["rows_sent"] + d["rows_skipped"] == ROWS
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    assert_delivered(consume_all(bs, topic), expected, report, mode)
