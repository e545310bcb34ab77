"""Delivery under real faults: an executor, a broker and the driver killed with ``kill -9``,
a broker paused with SIGSTOP, every broker down; then ``--resume``.

Each test shows that its fault landed while rows were being sent and that it mattered (a
task run again, a transaction aborted, a partition's leader moved, the run failed), then
reads the topic back with a ``read_committed`` consumer and compares the exact multiset of
rows with what Python's csv module reads from the input: nothing lost; in exactly-once
mode nothing twice; in at-least-once mode exactly the duplicates the report counts. Every
wait is for a condition, bounded.
"""

from __future__ import annotations

import os
import signal
import threading

import psutil
import pytest
from confluent_kafka.admin import AdminClient

import page_view
from faults import (
    assert_c_loops,
    assert_delivered,
    cli,
    committed,
    committed_rows,
    error_lines,
    executors,
    landed_mid_send,
    resumed,
    sent_so_far,
    stop_group,
    summary,
    wait_for,
)
from helpers import consume_all, expected_rows
from kappa_ingest import config, datagen
from kappa_ingest.report import plots
from kappa_ingest.report import store as metrics_store

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ROWS = 20_000


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = datagen.generate("wide30", ROWS, tmp_path_factory.mktemp("faults") / "in.csv", seed=11)
    return path, expected_rows(path)


BIG = 80_000


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """Units of ~11 MB: more than a worker holds of its input, so one whose driver died
    cannot finish its unit from what it was given before."""
    path = datagen.generate("wide30", BIG, tmp_path_factory.mktemp("faults-big") / "in.csv", seed=12)
    return path, expected_rows(path)


def led(bootstrap: str, *topics: str) -> bool:
    """Every partition of ``topics`` has a leader: a woken broker fences and unfences
    itself (its session expired while it slept) and, with many partitions, that takes a while."""
    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=2)
    except Exception:  # noqa: BLE001 - not answering yet; the caller's deadline bounds it
        return False
    return all(t in md.topics and all(p.leader >= 0 for p in md.topics[t].partitions.values()) for t in topics)


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
        running = executors(proc)
        assert len(running) == 2, running
        landed_mid_send(kafka.bootstrap_servers, [run_id], ROWS)
        running[0].kill()
        assert proc.wait(180) == 0, log.read_text()[-3000:]
    finally:
        stop_group(proc)
    report = summary(metrics, run_id)
    assert report["status"] == "succeeded", report["error"]
    assert report["duplicates"]["failed_attempts"], "the kill did not fail a sending task"
    if mode == "exactly-once":
        assert report["delivery"]["transactions_aborted"] >= 1
    assert report["rows_sent"] == ROWS and all(c["ok"] for c in report["checks"]), report["checks"]
    assert_c_loops(report)
    assert_delivered(consume_all(kafka.bootstrap_servers, topic), expected, [report], mode)
    if sink == "confluent":  # its page: the timeline of a run on two executors draws its failed attempt hatched
        run = metrics_store.run(metrics, run_id)
        failed = [t for t in run["tasks"] if t["status"] != "SUCCESS"]
        hatched = [p for p in plots.task_timeline(run).axes[0].patches if p.get_hatch()]
        assert failed and len(hatched) == len(failed)
        page_view.check_run_page(run, figures=3)  # as a reader meets it, in Chromium


@pytest.mark.parametrize("mode", ["exactly-once", "at-least-once"])
def test_a_driver_killed_mid_run_is_completed_by_resume(kafka, tmp_path, big, mode):
    path, expected = big
    topic, run_id, metrics = f"driver-kill-{mode}", f"driver-kill-{mode}", tmp_path / "m"
    bs = kafka.bootstrap_servers
    proc = cli("--input", str(path), "--topic", topic, "--bootstrap-servers", bs, "--master", "local[2]",
               "--partitions", "4", "--target-rate", "16000", "--delivery", mode, "--run-id", run_id,
               "--metrics-dir", str(metrics), "--quiet", log=tmp_path / "run.log")  # fmt: skip
    try:
        # Killed once the first two tasks are in the ledger and the next two have sent rows of their own.
        def half_way() -> bool:
            done = committed(bs, run_id)
            return len(done) >= 2 and sent_so_far(bs, topic) > sum(e.rows_sent for e in done) + 8000

        wait_for(half_way, 120, "half way", proc, tmp_path / "run.log")
        landed_mid_send(bs, [run_id], BIG)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        _, alive = psutil.wait_procs(children, timeout=30)  # the JVM ends with its driver, the workers with it
        assert not alive, f"left running after the driver was killed: {alive}"
    finally:
        stop_group(proc)
    killed = summary(metrics, run_id)
    assert killed["status"] == "running" and killed["plan"]  # it wrote its plan before sending, then died
    report = resumed(run_id, metrics, tmp_path / "resume.log")
    d = report["delivery"]
    assert report["status"] == "succeeded" and d["resumed_from"] == run_id and d["mode"] == mode, report["error"]
    assert d["lineage"] == run_id
    if mode == "exactly-once":  # the killed run's tasks had transactions open: the resumed run ended them
        assert d["lock"]["lingering_transactions_ended"] >= 1, d["lock"]
    assert d["splits_skipped"] >= 2 and report["rows_sent"] + d["rows_skipped"] == BIG
    assert report["rows_sent"] > 0, "the killed run's workers finished what the resumed run was to send"
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    assert_c_loops(report)
    assert_delivered(consume_all(bs, topic), expected, [report], mode)


def run_in_thread(cfg, spark):
    """ingest(cfg) on a thread of the test's process (its shared Spark); (thread, outcome)."""
    from kappa_ingest.ingest import ingest

    outcome: dict = {}

    def target() -> None:
        try:
            outcome["report"] = ingest(cfg, spark, echo=False)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome["error"] = e

    t = threading.Thread(target=target, name="ingest-under-test")
    t.start()
    return t, outcome


def fault_config(tmp_path, path, bootstrap, topic, **extra):
    return config.validate({"inputs": [str(path)], "topic": topic, "bootstrap_servers": bootstrap, "partitions": 4,
                            "target_rate": 8000, "run_id": topic, "metrics_dir": str(tmp_path / "m"), "quiet": True,
                            **extra})  # fmt: skip


def leaders(brokers: list, topic: str) -> dict[int, int]:
    """Each partition's leader, as ``brokers`` (the ones still answering) say."""
    bootstrap = ",".join(b.address for b in brokers)
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


def moved_off(cluster, victim, topic: str, led: set[int]) -> bool:
    """The partitions ``led`` by ``victim`` have another leader, as the other brokers say."""
    try:
        now = leaders([b for b in cluster.now.brokers if b.node_id != victim.node_id], topic)
    except Exception:  # noqa: BLE001 - asked again until the deadline
        return False
    return all(now[p] not in (victim.node_id, -1) for p in led)


def test_a_broker_killed_mid_run_is_survived(spark, cluster, tmp_path, data):
    """The leader of a partition the run writes is killed mid-send: its partitions get a new
    leader and the run, its producers retrying there, sends on to the end, every row once."""
    path, expected = data
    topic = cluster.topic("broker-kill")
    cfg = fault_config(tmp_path, path, cluster.bootstrap_servers, topic)
    t, outcome = run_in_thread(cfg, spark)
    try:
        wait_for(lambda: sent_so_far(cluster.bootstrap_servers, topic) >= 5000, 60, "sending")
        victim = cluster.broker_leading(topic)
        led = {p for p, leader in leaders(cluster.now.brokers, topic).items() if leader == victim.node_id}
        at_kill = landed_mid_send(cluster.bootstrap_servers, [cfg.run_id], ROWS)
        os.kill(victim.pid, signal.SIGKILL)
        wait_for(lambda: moved_off(cluster, victim, topic, led), 60, "the killed broker's partitions led elsewhere")
        t.join(180)
        assert not t.is_alive(), "the run did not end"
    finally:
        t.join(180)
        cluster.heal()
    assert "error" not in outcome, outcome.get("error")
    assert committed_rows(cluster.bootstrap_servers, cfg.run_id) > at_kill  # units committed after the kill
    report = summary(tmp_path / "m", cfg.run_id)
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert_c_loops(report)
    assert_delivered(consume_all(cluster.bootstrap_servers, topic), expected, [report])


def test_a_broker_paused_past_the_request_timeout_is_survived(spark, cluster, tmp_path, data):
    """The leader of a partition the run writes is paused mid-send (SIGSTOP) until the other
    brokers have given its partitions to another leader (after 4 s without its heartbeat):
    the requests the run's producers had made of it timed out (request.timeout.ms 3 s) and
    go to the new leader. Woken, it answers its stale requests: none of them may count."""
    path, expected = data
    topic = cluster.topic("broker-pause")
    cfg = fault_config(tmp_path, path, cluster.bootstrap_servers, topic, kafka_opts={"request.timeout.ms": "3000"})
    t, outcome = run_in_thread(cfg, spark)
    try:
        wait_for(lambda: sent_so_far(cluster.bootstrap_servers, topic) >= 5000, 60, "sending")
        victim = cluster.broker_leading(topic)
        led = {p for p, leader in leaders(cluster.now.brokers, topic).items() if leader == victim.node_id}
        at_pause = landed_mid_send(cluster.bootstrap_servers, [cfg.run_id], ROWS)
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: moved_off(cluster, victim, topic, led), 60, "the paused broker's partitions led elsewhere")
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        t.join(180)
        assert not t.is_alive(), "the run did not end"
    finally:
        t.join(180)
        cluster.heal()
    assert "error" not in outcome, outcome.get("error")
    assert committed_rows(cluster.bootstrap_servers, cfg.run_id) > at_pause  # and it went on to the end
    report = summary(tmp_path / "m", cfg.run_id)
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert_c_loops(report)
    assert_delivered(consume_all(cluster.bootstrap_servers, topic), expected, [report])


def test_the_only_broker_paused_past_delivery_timeout_fails_cleanly_and_resume_completes(spark, kafka, tmp_path, data):
    from kappa_ingest.errors import KafkaUnavailable
    from kappa_ingest.ingest import ingest

    path, expected = data
    topic, bs = "only-broker-pause", kafka.bootstrap_servers
    opts = {"request.timeout.ms": "2000", "delivery.timeout.ms": "5000"}
    cfg = fault_config(tmp_path, path, bs, topic, kafka_opts=opts)
    t, outcome = run_in_thread(cfg, spark)
    broker = kafka.brokers[0]
    try:
        wait_for(lambda: len(committed(bs, cfg.run_id)) >= 2, 60, "two splits committed")
        landed_mid_send(bs, [cfg.run_id], ROWS)
        os.kill(broker.pid, signal.SIGSTOP)
        t.join(180)  # the run fails within delivery.timeout.ms of its last answer (a hang: caught here)
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        t.join(180)
    assert isinstance(outcome.get("error"), KafkaUnavailable), outcome
    assert outcome["error"].exit_code == 4, outcome["error"]
    report = summary(tmp_path / "m", cfg.run_id)
    assert report["status"] == "failed" and len(report["ledger"]["committed"]) >= 2 and report["ledger"]["missing"]
    wait_for(lambda: led(bs, topic, cfg.ledger_topic), 60, "the woken broker leading its partitions again")
    # The paused broker answers its stale requests when it wakes: none of them may count.
    resumed = config.validate({"inputs": [str(path)], "topic": topic, "resume": cfg.run_id, "run_id": "pause-resumed",
                               "bootstrap_servers": bs, "metrics_dir": str(tmp_path / "m"), "quiet": True})  # fmt: skip
    ingest(resumed, spark, echo=False)
    report = summary(tmp_path / "m", "pause-resumed")
    d = report["delivery"]
    assert report["status"] == "succeeded" and d["splits_skipped"] >= 2, report["checks"]
    assert d["lineage"] == cfg.run_id and d["lock"]["lingering_transactions_ended"] >= 1  # the failed run's
    assert_c_loops(report)
    assert_delivered(consume_all(bs, topic), expected, [report])


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
        landed_mid_send(bs, [run_id], ROWS)
        for b in cluster.now.brokers:
            os.kill(b.pid, signal.SIGKILL)
        rc = proc.wait(120)
    finally:
        stop_group(proc)
        cluster.heal()
    out = (tmp_path / "run.log").read_text()
    assert rc == 4, (rc, out[-2000:])
    error = error_lines(tmp_path / "run.log")
    assert len(error) == 1 and "Kafka" in error[0], out[-2000:]
    report = summary(metrics, run_id)
    assert report["status"] == "failed" and len(report["ledger"]["committed"]) >= 2 and report["ledger"]["missing"]
    assert "splits missing" in out and f"--resume {run_id}" in out
    report = resumed(run_id, metrics, tmp_path / "resume.log")
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert report["delivery"]["lock"]["lingering_transactions_ended"] >= 1  # the killed brokers' open transactions
    assert_c_loops(report)
    assert_delivered(consume_all(bs, topic), expected, [report])
