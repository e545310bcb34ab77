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
import threading
import time
from collections import Counter
from pathlib import Path

import page_view
import psutil
import pytest
from confluent_kafka.admin import AdminClient

from helpers import consume_all, expected_rows, high_watermarks, rows
from kappa_ingest import config, datagen, ledger, local_kafka, metrics_store, plots
from kappa_ingest.topics import Admin

pytestmark = pytest.mark.integration

ROWS = 20_000


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


def led(bootstrap: str, *topics: str) -> bool:
    """Every partition of ``topics`` has a leader: a woken broker fences and unfences
    itself (its session expired while it slept) and, with many partitions, that takes a while."""
    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=2)
    except Exception:  # noqa: BLE001 - not answering yet; the caller's deadline bounds it
        return False
    return all(t in md.topics and all(p.leader >= 0 for p in md.topics[t].partitions.values()) for t in topics)


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


@pytest.mark.parametrize(
    ("sink", "mode"), [("confluent", "exactly-once"), ("kafka-python", "exactly-once"), ("spark", "at-least-once")]
)
def test_an_executor_killed_mid_send_is_retried_on_the_other(kafka, tmp_path, data, sink, mode):
    path, expected = data
    topic = run_id = f"executor-kill-{sink}-{mode}"
    metrics, log = tmp_path / "m", tmp_path / "log"
    proc = cli("--input", str(path), "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
               "--master", "local-cluster[2,1,1024]", "--partitions", "4", "--target-rate", "8000", "--sink", sink,
               "--delivery", mode, "--run-id", run_id, "--metrics-dir", str(metrics), "--quiet", log=log)  # fmt: skip
    try:
        wait_for(lambda: sent_so_far(kafka.bootstrap_servers, topic) >= 2000, 120, "sending", proc, log)
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
    if sink == "confluent":  # the page of a run on two executors with a failed attempt, as a reader sees it
        run = metrics_store.run(metrics, run_id)
        page_view.check_run_page(run, figures=3)
        failed = [t for t in run["tasks"] if t["status"] != "SUCCESS"]
        hatched = [p for p in plots.task_timeline(run).axes[0].patches if p.get_hatch()]
        assert failed and len(hatched) == len(failed)


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
    assert d["lineage"] == run_id and d["fenced_transactional_ids"] == (4 if mode == "exactly-once" else 0)
    assert d["splits_skipped"] >= 2 and report["rows_sent"] + d["rows_skipped"] == ROWS
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    assert_delivered(consume_all(bs, topic), expected, report, mode)


@pytest.fixture
def cluster(kafka3):
    return Brokers(kafka3)


class Brokers:
    """The session's three-broker cluster, as the fault tests use it."""

    def __init__(self, holder) -> None:
        self.holder = holder

    @property
    def now(self) -> local_kafka.LocalKafka:
        return self.holder.now

    @property
    def bootstrap_servers(self) -> str:
        return self.holder.bootstrap_servers

    def heal(self) -> None:
        self.holder.heal()

    def broker_leading(self, topic: str, partition: int = 0) -> local_kafka.Broker:
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap_servers}).list_topics(topic, timeout=10)
        leader = md.topics[topic].partitions[partition].leader
        return next(b for b in self.now.brokers if b.node_id == leader)

    def topic(self, name: str) -> str:
        """A topic on every broker, two of them in sync for a write to count (acks=all)."""
        with Admin(self.bootstrap_servers) as admin:
            admin.ensure_topic(name, 3, 3, {"min.insync.replicas": "2"})
        return name


def run_in_thread(cfg):
    """ingest(cfg) on a thread of the test's process (its shared Spark); (thread, outcome)."""
    from kappa_ingest.ingest import ingest

    outcome: dict = {}

    def target() -> None:
        try:
            outcome["report"] = ingest(cfg, SPARK[0], echo=False)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome["error"] = e

    t = threading.Thread(target=target, name="ingest-under-test")
    t.start()
    return t, outcome


SPARK: list = []


@pytest.fixture
def in_process(spark):
    SPARK[:] = [spark]
    return spark


def fault_config(tmp_path, path, bootstrap, topic, **extra):
    return config.validate({"inputs": [str(path)], "topic": topic, "bootstrap_servers": bootstrap, "partitions": 4,
                            "target_rate": 8000, "run_id": topic, "metrics_dir": str(tmp_path / "m"), "quiet": True,
                            **extra})  # fmt: skip


def test_a_broker_killed_mid_run_is_survived(in_process, cluster, tmp_path, data):
    path, expected = data
    topic = cluster.topic("broker-kill")
    cfg = fault_config(tmp_path, path, cluster.bootstrap_servers, topic)
    t, outcome = run_in_thread(cfg)
    try:
        wait_for(lambda: sent_so_far(cluster.bootstrap_servers, topic) >= 5000, 60, "sending")
        victim = cluster.broker_leading(topic)
        os.kill(victim.pid, signal.SIGKILL)
        t.join(180)
        assert not t.is_alive(), "the run did not end"
    finally:
        t.join(180)
        cluster.heal()
    assert "error" not in outcome, outcome.get("error")
    report = summary(tmp_path / "m", cfg.run_id)
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert_delivered(consume_all(cluster.bootstrap_servers, topic), expected, report, "exactly-once")


def test_a_broker_paused_past_the_request_timeout_is_survived(in_process, cluster, tmp_path, data):
    path, expected = data
    topic = cluster.topic("broker-pause")
    cfg = fault_config(tmp_path, path, cluster.bootstrap_servers, topic, kafka_opts={"request.timeout.ms": "3000"})
    t, outcome = run_in_thread(cfg)
    try:
        wait_for(lambda: sent_so_far(cluster.bootstrap_servers, topic) >= 5000, 60, "sending")
        victim = cluster.broker_leading(topic)
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(8)  # well past request.timeout.ms: its requests time out, then it answers them late
        os.kill(victim.pid, signal.SIGCONT)
        t.join(180)
        assert not t.is_alive(), "the run did not end"
    finally:
        t.join(180)
        cluster.heal()
    assert "error" not in outcome, outcome.get("error")
    report = summary(tmp_path / "m", cfg.run_id)
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert_delivered(consume_all(cluster.bootstrap_servers, topic), expected, report, "exactly-once")


def test_the_only_broker_paused_past_delivery_timeout_fails_cleanly_and_resume_completes(
    in_process, kafka, tmp_path, data
):
    from kappa_ingest.errors import KafkaUnavailable
    from kappa_ingest.ingest import ingest

    path, expected = data
    topic, bs = "only-broker-pause", kafka.bootstrap_servers
    opts = {"request.timeout.ms": "2000", "delivery.timeout.ms": "5000"}
    cfg = fault_config(tmp_path, path, bs, topic, kafka_opts=opts)
    t, outcome = run_in_thread(cfg)
    broker = kafka.brokers[0]
    try:
        wait_for(lambda: len(committed(bs, cfg.run_id)) >= 2, 60, "two splits committed")
        os.kill(broker.pid, signal.SIGSTOP)
        paused = time.monotonic()
        t.join(90)
        failed_after = time.monotonic() - paused
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        t.join(180)
    assert isinstance(outcome.get("error"), KafkaUnavailable), outcome
    assert outcome["error"].exit_code == 4 and failed_after < 60, (failed_after, outcome["error"])
    report = summary(tmp_path / "m", cfg.run_id)
    assert report["status"] == "failed" and len(report["ledger"]["committed"]) >= 2 and report["ledger"]["missing"]
    wait_for(lambda: led(bs, topic, cfg.ledger_topic), 60, "the woken broker leading its partitions again")
    # The paused broker answers its stale requests when it wakes: none of them may count.
    resumed = config.validate({"inputs": [str(path)], "topic": topic, "resume": cfg.run_id, "run_id": "pause-resumed",
                               "bootstrap_servers": bs, "metrics_dir": str(tmp_path / "m"), "quiet": True})  # fmt: skip
    ingest(resumed, in_process, echo=False)
    report = summary(tmp_path / "m", "pause-resumed")
    d = report["delivery"]
    assert report["status"] == "succeeded" and d["splits_skipped"] >= 2, report["checks"]
    assert d["lineage"] == cfg.run_id and d["fenced_transactional_ids"] == 4  # the failed run's open transactions
    assert_delivered(consume_all(bs, topic), expected, report, "exactly-once")


def test_every_broker_down_exits_4_and_resume_completes_once_they_are_back(cluster, tmp_path, data):
    path, expected = data
    topic, run_id, metrics = cluster.topic("all-down"), "all-down", tmp_path / "m"
    bs = cluster.bootstrap_servers
    proc = cli("--input", str(path), "--topic", topic, "--bootstrap-servers", bs, "--master", "local[2]",
               "--partitions", "4", "--target-rate", "8000", "--kafka-opt", "delivery.timeout.ms=5000",
               "--kafka-opt", "request.timeout.ms=2000", "--run-id", run_id, "--metrics-dir", str(metrics),
               "--quiet", log=tmp_path / "run.log")  # fmt: skip
    try:
        wait_for(lambda: len(committed(bs, run_id)) >= 2, 120, "two splits committed", proc, tmp_path / "run.log")
        for b in cluster.now.brokers:
            os.kill(b.pid, signal.SIGKILL)
        down = time.monotonic()
        rc = proc.wait(120)
        took = time.monotonic() - down
    finally:
        stop_group(proc)
        cluster.heal()
    out = (tmp_path / "run.log").read_text()
    assert rc == 4 and took < 60, (rc, took, out[-2000:])
    error = [line for line in out.splitlines() if line.startswith("kappa-ingest: error:")]
    assert len(error) == 1 and "Kafka" in error[0], out[-2000:]
    report = summary(metrics, run_id)
    assert report["status"] == "failed" and len(report["ledger"]["committed"]) >= 2 and report["ledger"]["missing"]
    assert "splits missing" in out and f"--resume {run_id}" in out
    resumed = cli("--resume", run_id, "--metrics-dir", str(metrics), "--run-id", f"{run_id}-2", "--quiet",
                  log=tmp_path / "resume.log")  # fmt: skip
    try:
        assert resumed.wait(180) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    finally:
        stop_group(resumed)
    report = summary(metrics, f"{run_id}-2")
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert report["delivery"]["fenced_transactional_ids"] == 4
    assert_delivered(consume_all(bs, topic), expected, report, "exactly-once")
