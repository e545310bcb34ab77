"""Exactly once through the recoveries Spark and Kafka make on their own: a stage run again
after its shuffle output was lost (its tasks start at attempt 0 again), a commit the
coordinator did not answer in time (retried, not the task), and transactions a failed run
left open (ended by the next run at its start, so no reader waits for them).

Each fault is made with real processes (kill -9, SIGSTOP), held to the moment it must land
by a fault point in the task (``kappa_ingest.failpoints``); each test reads the topic back
``read_committed`` and finds every row once, as the csv module reads the input."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
from kafka.admin import KafkaAdminClient

from faults import (
    assert_c_loops,
    assert_delivered,
    cli,
    committed,
    executor_of,
    executors,
    resumed,
    sent_so_far,
    stop_group,
    summary,
    wait_for,
)
from helpers import consume_all, expected_rows, held_back, high_watermarks
from kappa_ingest import datagen, failpoints
from kappa_ingest.config.choices import DEFAULT_LEDGER_TOPIC as DEFAULT_TOPIC

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def _markers(directory: Path, point: str) -> list[Path]:
    return sorted(directory.glob(f"*.{point}"))


def _release_all(directory: Path, point: str) -> None:
    for m in _markers(directory, point):
        m.unlink(missing_ok=True)


def test_a_stage_run_again_after_its_shuffle_output_was_lost_sends_nothing_twice(kafka, tmp_path):
    """--order-by-event-time --partitions 1: one sending task over shuffled rows, read by two
    map tasks (two files). The executors are killed after the sending task committed and
    before Spark heard of it: the map outputs are gone with them, so Spark runs the map
    stage and then the sending stage again on new executors, whose task starts at attempt
    0. It must read the ledger all the same."""
    paths = [datagen.generate("debs2012", 10_000, tmp_path / f"in{i}.csv", seed=3 + i) for i in range(2)]
    expected = expected_rows(paths[0]) + expected_rows(paths[1])
    held, log, metrics = tmp_path / "held", tmp_path / "run.log", tmp_path / "m"
    held.mkdir()
    topic = run_id = "stage-rerun"
    proc = cli("--input", str(tmp_path / "in*.csv"), "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
               "--master", "local-cluster[2,1,1024]", "--partitions", "1", "--order-by-event-time",
               "--key-column", "mf01", "--event-time-column", "ts", "--run-id", run_id, "--metrics-dir", str(metrics),
               "--quiet", log=log, env={failpoints.ENV: f"{failpoints.AFTER_COMMIT}:{held}"})  # fmt: skip
    try:
        wait_for(lambda: _markers(held, failpoints.AFTER_COMMIT), 180, "the task committed", proc, log)
        [marker] = _markers(held, failpoints.AFTER_COMMIT)
        assert sum(e.rows_sent for e in committed(kafka.bootstrap_servers, run_id)) == sum(expected.values())
        running = executors(proc)
        assert executor_of(int(marker.read_text())).pid in {e.pid for e in running}
        for executor in running:  # with every map output gone, the map stage must run again
            executor.kill()
        marker.unlink()
        deadline = time.monotonic() + 180
        while proc.poll() is None and time.monotonic() < deadline:  # the stage's next run commits nothing new
            _release_all(held, failpoints.AFTER_COMMIT)
            time.sleep(0.1)
        assert proc.wait(10) == 0, log.read_text()[-3000:]
    finally:
        stop_group(proc)
    report = summary(metrics, run_id)
    sending = [s for s in report["stages"] if s["sends"]]
    assert any(s["attempt"] > 0 for s in sending), report["stages"]  # the sending stage ran again
    again = [t for t in report["tasks"] if t["attempt"] == 0 and t["stage_id"] in {s["stage_id"] for s in sending}]
    assert len(again) >= 2, report["tasks"]  # attempt 0 of the first stage run, and of the next
    assert report["delivery"]["committed_by_failed_attempts"]["rows"] == sum(expected.values())
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert_c_loops(report)
    assert_delivered(consume_all(kafka.bootstrap_servers, topic), expected, [report])


def test_a_commit_the_coordinator_did_not_answer_in_time_is_retried_not_the_task(kafka, tmp_path):
    """Kafka's calls wait at most delivery.timeout.ms (5 s here); the coordinator is paused
    while a unit commits, until the commit call has timed out and the task is about to call
    it again (its fault point). The timeout is retriable: the commit is called again, as
    long as the broker keeps the transaction, and the task is not run again."""
    path = datagen.generate("wide30", 20_000, tmp_path / "in.csv", seed=4)
    expected = expected_rows(path)
    held, log, metrics = tmp_path / "held", tmp_path / "run.log", tmp_path / "m"
    held.mkdir()
    topic = run_id = "commit-retried"
    broker = kafka.brokers[0]
    proc = cli("--input", str(path), "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
               "--master", "local[2]", "--partitions", "1", "--run-id", run_id, "--metrics-dir", str(metrics),
               "--kafka-opt", "delivery.timeout.ms=5000", "--quiet", log=log,
               env={failpoints.ENV: f"{failpoints.BEFORE_COMMIT},{failpoints.COMMIT_RETRY}:{held}"})  # fmt: skip
    try:
        wait_for(lambda: _markers(held, failpoints.BEFORE_COMMIT), 180, "the task about to commit", proc, log)
        # Its records and its ledger entry are flushed, not committed: they hold a
        # read_committed reader back.
        assert held_back(kafka.bootstrap_servers, topic)
        os.kill(broker.pid, signal.SIGSTOP)  # the coordinator, and every partition's leader
        try:
            _release_all(held, failpoints.BEFORE_COMMIT)
            wait_for(lambda: _markers(held, failpoints.COMMIT_RETRY), 120, "the commit timed out, to be retried",
                     proc, log)  # fmt: skip
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        _release_all(held, failpoints.COMMIT_RETRY)
        assert proc.wait(180) == 0, log.read_text()[-3000:]
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        stop_group(proc)
    report = summary(metrics, run_id)
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert not report["duplicates"]["failed_attempts"], "the task was run again"
    assert report["delivery"]["commit_retries"] >= 1, report["delivery"]
    assert report["delivery"]["transactions_committed"] == 1 and report["delivery"]["transactions_aborted"] == 0
    assert_c_loops(report)
    assert_delivered(consume_all(kafka.bootstrap_servers, topic), expected, [report])


def _open_transactions(bootstrap: str, prefix: str) -> list[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    try:
        found = admin.list_transactions(state_filters=["Ongoing"])
    finally:
        admin.close()
    return [t.transactional_id for listing in found.values() for t in listing if t.transactional_id.startswith(prefix)]


def _settled(bootstrap: str, topic: str) -> bool:
    """The topic's high watermarks can be read (brokers just back are catching up)."""
    try:
        high_watermarks(bootstrap, topic, timeout_s=0)  # one probe: the caller polls
        return True
    except Exception:  # noqa: BLE001 - not yet; the caller's deadline bounds the wait
        return False


def test_transactions_a_failed_run_left_open_are_ended_by_the_next_run_at_its_start(cluster, tmp_path):
    # Four files, four units of a scheduled (incremental) run's; they land in a directory.
    landing = tmp_path / "landing"
    paths = [datagen.generate("wide30", 5_000, landing / f"part-{i}.csv", seed=5 + i) for i in range(4)]
    expected = sum((expected_rows(p) for p in paths), Counter())
    topic, metrics, bs = cluster.topic("left-open"), tmp_path / "m", cluster.bootstrap_servers
    common = ["--input", str(landing), "--topic", topic, "--bootstrap-servers", bs, "--master", "local[2]",
              "--metrics-dir", str(metrics), "--quiet", "--incremental"]  # fmt: skip
    # Its transactions outlive any restart here (ten minutes): only the next run may end them.
    held, log = tmp_path / "held", tmp_path / "failed.log"
    held.mkdir()
    first = cli(*common, "--partitions", "4", "--kafka-opt", "delivery.timeout.ms=5000",
                "--kafka-opt", "request.timeout.ms=2000", "--kafka-opt", "transaction.timeout.ms=600000",
                "--run-id", "failed", log=log,
                env={failpoints.ENV: f"{failpoints.MID_SEND},{failpoints.BEFORE_COMMIT},{failpoints.COMMIT_RETRY}:{held}"})  # fmt: skip
    sending, point = failpoints.MID_SEND, failpoints.BEFORE_COMMIT

    def pair_to(at: str, what: str) -> None:
        """Both units of the two slots held at ``at``, then let go."""
        wait_for(lambda: len(_markers(held, at)) == 2, 180, what, first, log)
        _release_all(held, at)

    try:
        # Two units sent and committed; the brokers die while the next two are about to
        # commit (their records and ledger entries written, not committed): their
        # transactions stay open, on the data topic and on the ledger, which every run reads.
        # Each pair is held first as it begins sending, when both have read the ledger: a
        # unit whose ledger entry is written and not committed holds up the ledger's readers,
        # the other unit's too. (So the test reads no ledger either while units are held.)
        pair_to(sending, "two units sending")
        pair_to(point, "two units about to commit")
        # Two slots: the next two units begin once the first two have committed.
        pair_to(sending, "the next two units sending")
        wait_for(lambda: len(_markers(held, point)) == 2, 120, "the next two units about to commit", first, log)
        assert sent_so_far(bs, topic) >= 20_000, "every record of the four units written"
        for b in cluster.now.brokers:
            os.kill(b.pid, signal.SIGKILL)
        _release_all(held, point)
        # Its commits time out and are retried while the transactions may live (ten minutes);
        # a scheduler gives up sooner and kills it: nothing of the run is left to end them but the next run.
        wait_for(lambda: len(_markers(held, failpoints.COMMIT_RETRY)) == 2, 120, "both commits timed out, retried",
                 first, log)  # fmt: skip
    finally:
        stop_group(first)
        cluster.heal()
    scope = "kappa-ingest.topic:left-open:"
    # Both topics' leaders caught up: the ledger's is read below too (else "Leader high watermark
    # is not caught up", seen once).
    wait_for(lambda: _settled(bs, topic) and _settled(bs, DEFAULT_TOPIC), 60, "the brokers back")
    left = _open_transactions(bs, scope)
    assert left, "the brokers' death left no transaction open: the fault landed between units"
    assert held_back(bs, topic), "nothing held a read_committed consumer back"
    assert held_back(bs, DEFAULT_TOPIC), "nothing held the ledger's readers back"
    second = cli(*common, "--run-id", "next", log=tmp_path / "next.log")
    try:
        assert second.wait(180) == 0, (tmp_path / "next.log").read_text()[-3000:]
    finally:
        stop_group(second)
    report = summary(metrics, "next")
    # Ended by the next run at its start (not by their timeout, ten minutes away): readers go on.
    assert report["delivery"]["lock"]["lingering_transactions_ended"] >= len(left), report["delivery"]["lock"]
    assert not _open_transactions(bs, scope)
    assert not held_back(bs, topic) and not held_back(bs, DEFAULT_TOPIC)
    assert_c_loops(report)
    assert len(committed(bs, "failed")) == 2  # the fault landed mid-run: two of its four units were in
    assert_delivered(consume_all(bs, topic), expected, [report])


def test_a_driver_killed_while_a_unit_commits_beside_the_next_ones_sending_is_completed_by_resume(kafka, tmp_path):
    """One task, its share in three splits (--split-size): a unit's commit runs on a thread
    while the next unit is sent. The first unit is held about to commit (its records and
    ledger entry written) while the second has records at the broker in a transaction of its
    own; the driver is killed then, both transactions open. The resumed run ends them, keeps
    the three splits of the plan and sends every row once."""
    path = datagen.generate("wide30", 18_000, tmp_path / "in.csv", seed=21)
    expected = expected_rows(path)
    held, log, metrics = tmp_path / "held", tmp_path / "run.log", tmp_path / "m"
    held.mkdir()
    topic = run_id = "units-overlapped"
    bs = kafka.bootstrap_servers
    proc = cli("--input", str(path), "--topic", topic, "--bootstrap-servers", bs, "--master", "local[2]",
               "--partitions", "1", "--split-size", str(path.stat().st_size // 3 + 1), "--run-id", run_id,
               "--metrics-dir", str(metrics), "--quiet", log=log,
               env={failpoints.ENV: f"{failpoints.MID_SEND},{failpoints.BEFORE_COMMIT}:{held}"})  # fmt: skip
    try:
        wait_for(lambda: _markers(held, failpoints.MID_SEND), 180, "the first unit sending", proc, log)
        [first] = _markers(held, failpoints.MID_SEND)
        _release_all(held, failpoints.MID_SEND)
        wait_for(lambda: _markers(held, failpoints.BEFORE_COMMIT), 120, "the first unit about to commit", proc, log)
        wait_for(lambda: [m for m in _markers(held, failpoints.MID_SEND) if m.name != first.name], 120,
                 "the second unit sending while the first commits", proc, log)  # fmt: skip
        assert len(_markers(held, failpoints.BEFORE_COMMIT)) == 1  # (the first's; the second's rows still coming)
        assert held_back(bs, topic) and held_back(bs, DEFAULT_TOPIC)  # open: records, and the first's entry
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        psutil.wait_procs(children, timeout=30)
    finally:
        stop_group(proc)
    report = resumed(run_id, metrics, tmp_path / "resume.log")
    d = report["delivery"]
    assert report["status"] == "succeeded" and d["resumed_from"] == run_id, report["error"]
    assert d["lock"]["lingering_transactions_ended"] >= 2, d["lock"]  # both units' transactions, left open
    assert d["splits_skipped"] == 0 and d["transactions_committed"] == 3 and report["rows_sent"] == 18_000
    assert not committed(bs, run_id) and len(committed(bs, f"{run_id}-2")) == 3
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    assert_c_loops(report)
    assert_delivered(consume_all(bs, topic), expected, [report])
