"""The run's reconciliation against the topic as it really is: a read-back checks each unit
where its producer wrote it (the C loop's offsets, carried by the tasks' statistics to the
driver), and a topic that holds fewer records than were sent fails the run with exit 4."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from helpers import consume_all, delete_records, expected_rows, rows, run
from kappa_ingest import config, datagen, failpoints
from kappa_ingest.delivery import reconcile
from kappa_ingest.errors import KafkaUnavailable
from kappa_ingest.ingest import ingest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def three_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("reconcile")
    paths = [datagen.generate("wide30", n, d / f"part-{i}.csv", seed=60 + i) for i, n in enumerate((3000, 2000, 1000))]
    return paths, sum((expected_rows(p) for p in paths), Counter())


def _unit_check(summary: dict) -> dict:
    [check] = [c for c in summary["checks"] if c["name"] == reconcile.UNIT_BY_UNIT]
    return check


@pytest.mark.parametrize(
    ("mode", "partitions", "files", "producers"),
    [
        ("exactly-once", None, 3, "3 transactions"),  # a transaction per unit
        ("exactly-once", 4, 1, "4 transactions"),  # shuffled: a transaction per task, one part of the unit each
        ("at-least-once", None, 3, "{tasks} producers"),  # a producer per task, its units together
    ],
)
def test_a_read_back_finds_each_units_rows_where_its_producer_wrote_them(
    spark, kafka, tmp_path, three_files, mode, partitions, files, producers
):
    paths, _ = three_files
    inputs = [str(p) for p in paths[:files]]
    extra = {"partitions": partitions} if partitions else {}
    _, summary, records = run(spark, kafka, tmp_path, inputs=inputs, delivery=mode, verify="read-back", **extra)
    assert summary["status"] == "succeeded" and all(c["ok"] for c in summary["checks"]), summary["checks"]
    units = len(summary["ledger"]["committed"])
    assert units == (4 if partitions else files)
    check = _unit_check(summary)
    producers = producers.format(tasks=summary["delivery"]["tasks"])
    assert check["expected"] == check["actual"] == f"{units} units in {producers}", check
    assert {e["record_loops"] for e in summary["executors"]} == {"C"}  # the loop that notes the offsets
    assert rows(records) == sum((expected_rows(p) for p in paths[:files]), Counter())


def test_records_deleted_from_the_topic_before_the_read_back_fail_the_run_with_exit_4(
    spark, kafka, tmp_path, three_files, monkeypatch
):
    """The driver is held after the send, before it reads the topic back; meanwhile the first
    records the run wrote to each partition are deleted with kafka-delete-records. The
    read-back finds fewer: exit 4, one line saying how many the topic holds, and the units
    whose records are gone named by the unit-by-unit check."""
    paths, _ = three_files
    held = tmp_path / "held"
    held.mkdir()
    monkeypatch.setenv(failpoints.ENV, f"{failpoints.BEFORE_RECONCILE}:{held}")
    topic = "taken-away"
    cfg = config.validate({"inputs": [str(p) for p in paths], "topic": topic, "verify": "read-back",
                           "bootstrap_servers": kafka.bootstrap_servers, "metrics_dir": str(tmp_path / "m"),
                           "run_id": topic})  # fmt: skip
    outcome: dict = {}

    def target() -> None:
        try:
            ingest(cfg, spark, echo=False)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome["error"] = e

    t = threading.Thread(target=target, name="ingest-under-test")
    t.start()
    marker = held / f"{topic}.{failpoints.BEFORE_RECONCILE}"
    try:
        t.join(0)
        for _ in range(1200):  # the send done: the driver waits at its failpoint (bounded: 120 s)
            if marker.exists() or not t.is_alive():
                break
            t.join(0.1)
        assert marker.exists(), outcome
        sent = consume_all(kafka.bootstrap_servers, topic)
        # From the partition that got the most (a sticky partitioner may leave one with few).
        counts = Counter(r.partition for r in sent)
        fullest = max(counts, key=counts.__getitem__)
        cut = min(500, counts[fullest] - 1)
        delete_records(kafka.bootstrap_servers, topic, {fullest: cut}, tmp_path)
    finally:
        marker.unlink(missing_ok=True)
        t.join(120)
    assert not t.is_alive()
    left = consume_all(kafka.bootstrap_servers, topic)
    kept = [r for r in sent if not (r.partition == fullest and r.offset < cut)]
    assert rows(left) == rows(kept) and len(kept) < len(sent) == sum(len(expected_rows(p)) for p in paths)
    error = outcome.get("error")
    assert isinstance(error, KafkaUnavailable) and error.exit_code == 4, outcome
    assert "\n" not in str(error) and f"Kafka holds {len(left):,} of the {len(sent):,} records" in str(error), error
    summary = json.loads((tmp_path / "m" / "runs" / topic / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == str(error) and summary["rows_sent"] == len(sent)
    check = _unit_check(summary)
    assert not check["ok"] and " differ (" in check["actual"] and " rows there)" in check["actual"], check
