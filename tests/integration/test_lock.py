"""One run at a time per topic: a second run exits 6 naming the first; a dead run's lock
is taken over (at once on its own host, after the lease elsewhere) and its transactions fenced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kappa_ingest import config, datagen, lock
from kappa_ingest.errors import LockHeld
from kappa_ingest.kafka_settings import connection_conf
from kappa_ingest.ledger import DEFAULT_TOPIC, read_records

pytestmark = pytest.mark.integration


def _cfg(kafka, topic: str, run_id: str, tmp_path) -> config.IngestConfig:
    return config.validate({"inputs": ["x.csv"], "topic": topic, "run_id": run_id, "metrics_dir": str(tmp_path),
                            "bootstrap_servers": kafka.bootstrap_servers})  # fmt: skip


def _fake_claim(kafka, topic: str, run_id: str, **fields) -> None:
    values = {"lineage": run_id, "host": "elsewhere", "pid": 1, "pid_started": None, "at_ms": time.time_ns() // 10**6,
              "tasks": 0, **fields}  # fmt: skip
    claim = lock.Claim(topic, run_id, **values)
    lock._write(connection_conf(None, kafka.bootstrap_servers), DEFAULT_TOPIC, claim.key(), claim.value())


def test_a_second_run_is_refused_naming_the_first_until_it_releases(kafka, tmp_path):
    first = lock.hold(_cfg(kafka, "locked", "run-a", tmp_path), kafka.bootstrap_servers)
    try:
        with pytest.raises(LockHeld, match=r"topic locked is locked by run run-a \(host .*, pid \d+, renewed") as e:
            lock.hold(_cfg(kafka, "locked", "run-b", tmp_path), kafka.bootstrap_servers)
        assert e.value.exit_code == 6
        other_topic = lock.hold(_cfg(kafka, "locked-other", "run-c", tmp_path), kafka.bootstrap_servers)
        other_topic.release()
    finally:
        first.release()
    second = lock.hold(_cfg(kafka, "locked", "run-b", tmp_path), kafka.bootstrap_servers)
    second.release()
    assert second.taken_over == []


def test_a_dead_runs_lock_is_taken_over_and_its_transactions_fenced(kafka, tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process of this host that no longer exists
    import socket

    _fake_claim(kafka, "orphaned", "killed-here", host=socket.gethostname(), pid=gone.pid, pid_started=1, tasks=2)
    _fake_claim(kafka, "orphaned", "silent-elsewhere", at_ms=time.time_ns() // 10**6 - 120_000)
    held = lock.hold(_cfg(kafka, "orphaned", "successor", tmp_path), kafka.bootstrap_servers)
    held.release()
    assert sorted(held.taken_over) == ["killed-here", "silent-elsewhere"]
    _fake_claim(kafka, "orphaned", "alive-elsewhere")  # renewed just now on another host: alive
    with pytest.raises(LockHeld, match="alive-elsewhere"):
        lock.hold(_cfg(kafka, "orphaned", "late", tmp_path), kafka.bootstrap_servers)
    records = read_records(connection_conf(None, kafka.bootstrap_servers), DEFAULT_TOPIC, isolation="read_uncommitted")
    assert lock.claims(records, "orphaned").keys() == {"alive-elsewhere"}  # the refused run withdrew its claim


def test_two_runs_at_once_the_second_exits_6(kafka, tmp_path):
    path = datagen.generate("debs2012", 20_000, tmp_path / "in.csv")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}

    def cli(run_id: str, log) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "kappa_ingest.cli", "ingest", "--input", str(path), "--topic", "two-at-once",
             "--bootstrap-servers", kafka.bootstrap_servers, "--metrics-dir", str(tmp_path / "m"), "--master",
             "local[1]", "--target-rate", "4000", "--run-id", run_id, "--quiet"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip

    conf = connection_conf(None, kafka.bootstrap_servers)
    with open(tmp_path / "a.log", "wb") as log:
        first = cli("first", log)
    try:
        deadline = time.monotonic() + 60
        while "first" not in lock.claims(
            read_records(conf, DEFAULT_TOPIC, isolation="read_uncommitted"), "two-at-once"
        ):
            assert time.monotonic() < deadline and first.poll() is None, (tmp_path / "a.log").read_text()[-2000:]
            time.sleep(0.2)
        second = subprocess.run(
            [sys.executable, "-m", "kappa_ingest.cli", "ingest", "--input", str(path), "--topic", "two-at-once",
             "--bootstrap-servers", kafka.bootstrap_servers, "--metrics-dir", str(tmp_path / "m"),
             "--run-id", "second", "--quiet"],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert first.wait(120) == 0, (tmp_path / "a.log").read_text()[-2000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert second.returncode == 6, second.stderr[-2000:]
    errors = [line for line in second.stderr.splitlines() if line.startswith("kappa-ingest: error:")]
    assert len(errors) == 1 and "locked by run first" in errors[0], second.stderr
    report = json.loads((tmp_path / "m" / "runs" / "second" / "summary.json").read_text())
    assert report["status"] == "failed" and "locked by run first" in report["error"]
