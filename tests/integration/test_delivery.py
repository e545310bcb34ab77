"""Delivery without faults: a run beside other producers of its topic, the refusals (exit 2),
``--resume`` of a run with nothing left to send, and of one whose unit another run sent."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from test_errors import assert_one_clean_line, cli

from faults import wait_for
from helpers import consume_all, csv_rows, expected_rows, rows
from kappa_ingest import config, datagen
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.ingest import ingest
from kappa_ingest.kafka.topics import Admin

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = datagen.generate("wide30", 20_000, tmp_path_factory.mktemp("delivery") / "in.csv", seed=3)
    return path, expected_rows(path)


def live_producers(bootstrap: str, topic: str, stop: threading.Event, once_made: bool = False) -> dict:
    """Other producers of the topic while the run sends: a plain one, and a transactional one
    committing every 50 records (and aborting every fourth transaction). ``once_made``: each
    begins once the topic exists (the run makes it)."""
    counts = {"plain": 0, "committed": 0}

    def plain() -> None:
        if once_made:
            made()
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        while not stop.is_set():
            p.produce(topic, json.dumps({"data": {"live": counts["plain"]}}).encode(), headers=[("run_id", b"live")])
            counts["plain"] += 1
            p.poll(0)
            time.sleep(0.0005)
        counts["unflushed"] = p.flush(30)  # asserted by the test, not here: a thread's assert fails nobody

    def made() -> None:
        with Admin(bootstrap) as admin:
            wait_for(lambda: stop.is_set() or admin.partitions(topic) is not None, 120, f"topic {topic} made")

    def transactional() -> None:
        if once_made:
            made()
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"live-{topic}"})
        p.init_transactions(30)
        n = 0
        while not stop.is_set():
            p.begin_transaction()
            for i in range(50):
                p.produce(topic, json.dumps({"data": {"txn": n, "i": i}}).encode(), headers=[("run_id", b"live-txn")])
            n += 1
            p.flush(30)  # delivered, then committed or aborted: aborted records sit in the log, skipped by readers
            if n % 4:
                p.commit_transaction(30)
                counts["committed"] += 50
            else:
                p.abort_transaction(30)

    threads = [threading.Thread(target=f, name=f"live-{f.__name__}") for f in (plain, transactional)]
    for t in threads:
        t.start()
    counts["threads"] = threads
    return counts


@pytest.mark.parametrize(("mode", "made_by_run"),
                         [("exactly-once", False), ("at-least-once", False), ("exactly-once", True)])  # fmt: skip
def test_reconciliation_holds_while_other_producers_write_to_the_topic(spark, kafka, tmp_path, data, mode,
                                                                        made_by_run):  # fmt: skip
    """Made by the run, the topic had no producer before it (none is asked): the others,
    writing from its making on, are seen as other writers all the same."""
    path, expected = data
    topic = f"shared-{mode}-{'made' if made_by_run else 'there'}"
    if not made_by_run:
        with Admin(kafka.bootstrap_servers) as admin:
            admin.ensure_topic(topic, 2, 1)
    stop = threading.Event()
    live = live_producers(kafka.bootstrap_servers, topic, stop, once_made=made_by_run)
    cfg = config.validate({"inputs": [str(path)], "topic": topic, "bootstrap_servers": kafka.bootstrap_servers,
                           "delivery": mode, "target_rate": 10_000, "metrics_dir": str(tmp_path / "m")})  # fmt: skip
    try:
        if not made_by_run:
            wait_for(lambda: live["plain"] > 0 and live["committed"] > 0, 60, "the other producers writing")
        ingest(cfg, spark, echo=False)
    finally:
        stop.set()
        for t in live["threads"]:
            t.join(60)
    assert live["unflushed"] == 0, "the plain producer's records were not all acknowledged"
    summary = json.loads((tmp_path / "m" / "runs" / cfg.run_id / "summary.json").read_text())
    assert summary["status"] == "succeeded" and all(c["ok"] for c in summary["checks"]), summary["checks"]
    assert summary["delivery"]["verified_by"].startswith("read back")  # the offsets grew by others' records too
    assert summary["broker"].get("other_producers", 0) >= 1  # the transactional one, seen by the brokers
    records = consume_all(kafka.bootstrap_servers, topic)
    by_run: dict[bytes, list] = {}
    for r in records:
        by_run.setdefault(r.headers["run_id"], []).append(r)
    assert rows(by_run[cfg.run_id.encode()]) == expected
    assert len(by_run[b"live"]) == live["plain"] > 0 and len(by_run[b"live-txn"]) == live["committed"] > 0


def test_the_spark_sink_refuses_exactly_once_naming_the_sinks_that_can(tmp_path, data):
    done = cli(tmp_path, "--input", str(data[0]), "--topic", "t", "--sink", "spark", "--delivery", "exactly-once")
    assert done.returncode == 2
    assert_one_clean_line(done.stderr, "spark sink", "--sink confluent or --sink kafka-python", "at-least-once")


def test_a_transaction_timeout_beyond_the_brokers_maximum_is_refused(spark, kafka, tmp_path, data):
    cfg = config.validate({"inputs": [str(data[0])], "topic": "too-long", "bootstrap_servers": kafka.bootstrap_servers,
                           "kafka_opts": {"transaction.timeout.ms": "3600000"}, "metrics_dir": str(tmp_path / "m")})  # fmt: skip
    with pytest.raises(UsageError, match=r"exceeds the brokers' transaction.max.timeout.ms \(900000\)"):
        ingest(cfg, spark, echo=False)


@pytest.fixture(scope="module")
def finished(spark, kafka, data, tmp_path_factory):
    """A small run that delivered everything, for --resume to find."""
    tmp = tmp_path_factory.mktemp("finished")
    path = datagen.generate("wide30", 3000, tmp / "in.csv", seed=5)
    cfg = config.validate({"inputs": [str(path)], "topic": "finished", "bootstrap_servers": kafka.bootstrap_servers,
                           "partitions": 3, "metrics_dir": str(tmp / "m"), "run_id": "finished"})  # fmt: skip
    ingest(cfg, spark, echo=False)
    return tmp, path


def test_resume_with_nothing_left_exits_0_without_starting_spark(kafka, finished):
    tmp, _ = finished
    done = cli(tmp, "--resume", "last", "--run-id", "finished-again")
    assert done.returncode == 0, done.stderr
    assert "sent 0 rows: all 3 splits of run finished were already delivered" in done.stdout
    assert "Setting default log level" not in done.stderr  # Spark's first words: it never started
    summary = json.loads((tmp / "m" / "runs" / "finished-again" / "summary.json").read_text())
    d = summary["delivery"]
    assert summary["status"] == "succeeded" and summary["rows_sent"] == 0
    assert d["resumed_from"] == "finished" and d["splits_skipped"] == 3 and d["rows_skipped"] == 3000
    assert rows(consume_all(kafka.bootstrap_servers, "finished")) == expected_rows(finished[1])


def test_resume_refuses_a_changed_input_file_naming_it(finished):
    tmp, path = finished
    stat = os.stat(path)
    try:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
        done = cli(tmp, "--resume", "finished", "--run-id", "finished-changed")
    finally:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert done.returncode == 2
    assert_one_clean_line(done.stderr, "--resume finished", "input changed", str(path), "modified")


def test_resume_refuses_another_topic_and_an_unknown_run(finished):
    tmp, _ = finished
    done = cli(tmp, "--resume", "finished", "--topic", "elsewhere")
    assert done.returncode == 2
    assert_one_clean_line(done.stderr, "sent to topic 'finished'")
    done = cli(tmp, "--resume", "no-such-run")
    assert done.returncode == 2
    assert_one_clean_line(done.stderr, "--resume no-such-run", "no report of that run")


def test_resume_counts_a_unit_another_lineage_delivered_since(spark, kafka, tmp_path):
    """The --resume rule (guarantees.counts_as_delivered): any run's entry of a unit counts.
    A strict run fails on a row too large for its topic (the last of three units); a
    scheduled --incremental run (another lineage, which quarantines that row) sends what
    the ledger lacks; then --resume of the strict run has nothing left to send, and the topic
    holds every row once. Were only the lineage's own entries to count, the resumed run
    would send the unit again (and fail on the same row)."""
    topic = "another-lineage"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 2, 1, config={"max.message.bytes": "65536"})])[topic].result(30)
    path = tmp_path / "in.csv"
    datagen.generate("wide30", 3000, path, seed=21)
    lines = path.read_bytes().splitlines(keepends=True)
    wide = lines[2950].split(b",", 1)  # a row near the end, in the last unit: one field 100 kB wide
    lines[2950] = wide[0] + b"," + b"x" * 100_000 + wide[1][wide[1].index(b",") :]
    path.write_bytes(b"".join(lines))
    good = expected_rows(path)
    _, rows_in, _ = csv_rows(path)
    too_large = Counter([json.dumps(rows_in[2949], sort_keys=True)])
    common = {"inputs": [str(path)], "topic": topic, "bootstrap_servers": kafka.bootstrap_servers,
              "metrics_dir": str(tmp_path / "m")}  # fmt: skip
    strict = config.validate({**common, "run_id": "strict", "partitions": 3, "strict_size": True})
    with pytest.raises(InputError, match="--strict-size refuses the run"):
        ingest(strict, spark, echo=False)
    first = summary_of(tmp_path, "strict")
    assert first["status"] == "failed" and first["ledger"]["missing"], first["ledger"]
    last_unit = first["ledger"]["missing"][-1]
    scheduled = config.validate({**common, "run_id": "scheduled", "incremental": True})
    ingest(scheduled, spark, echo=False)
    second = summary_of(tmp_path, "scheduled")
    assert second["status"] == "succeeded" and second["rows_quarantined"] == 1
    assert last_unit in second["ledger"]["committed"], second["ledger"]
    resumed = config.validate({**common, "resume": "strict", "run_id": "strict-resumed"})
    ingest(resumed, spark, echo=False)
    third = summary_of(tmp_path, "strict-resumed")
    assert third["status"] == "succeeded" and third["rows_sent"] == 0
    assert third["delivery"]["splits_skipped"] == 3
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == good - too_large  # every row once


def summary_of(tmp_path, run_id: str) -> dict:
    return json.loads((tmp_path / "m" / "runs" / run_id / "summary.json").read_text())
