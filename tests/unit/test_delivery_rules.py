"""The pure parts of delivery: units and the split size, ledger records, the modes and
their refusals, the transaction timeout, and a task's input by unit."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from kappa_ingest.config.choices import DEFAULT_MODE, resolve_mode
from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery import ledger
from kappa_ingest.errors import KafkaUnavailable, UsageError
from kappa_ingest.report.run import RunReport
from kappa_ingest.sinks.task_stats import TaskStats
from kappa_ingest.sinks.task_units import DROP, TaskInput
from kappa_ingest.source import splits
from kappa_ingest.source.columns import BLOCK_COL, BLOCK_LEN_COL, FILE_COL, LINE_COL
from kappa_ingest.source.records import Encoded
from kappa_ingest.source.splits import InputFile, Plan, Unit
from kappa_ingest.source.task_input import segments
from kappa_ingest.spark.metrics import SparkRunMetrics, StageInfo, TaskInfo


def test_splits_fall_at_multiples_of_the_split_size_and_gzip_is_one():
    plan = Plan((InputFile("/a.csv", 250, 1, True), InputFile("/b.csv.gz", 900, 2, False),
                 InputFile("/c.csv", 100, 3, True)), split_bytes=100)  # fmt: skip
    assert plan.splits(plan.files[0]) == [(0, 100), (100, 100), (200, 50)]
    assert plan.splits(plan.files[1]) == [(0, 900)]
    assert plan.splits(plan.files[2]) == [(0, 100)]
    assert len(Plan(plan.files, 100, parts=3).units()) == 3 * 5
    assert Plan.from_json(plan.to_json()) == plan


def test_the_default_split_size_is_sparks_own_rule_or_the_partitions_share():
    mb = 1 << 20
    assert splits.default_split_bytes([250 * mb], None, 2) == ((250 * mb + 4 * mb) // 2, 4 * mb)
    assert splits.default_split_bytes([1000 * mb], None, 2) == (128 * mb, 4 * mb)  # capped like Spark's
    assert splits.default_split_bytes([1 * mb], None, 8) == (4 * mb, 4 * mb)  # and floored
    assert splits.default_split_bytes([250 * mb], 5, 2) == (50 * mb, 0)
    # A task's share in units of at most UNIT_BYTES (64 MB), of about equal size.
    unit = splits.UNIT_BYTES
    assert unit == 64 * mb
    assert splits.default_split_bytes([250 * mb], 5, 2, unit) == (50 * mb, 0)
    assert splits.default_split_bytes([250 * mb], 2, 2, unit) == (-(-125 * mb // 2), 0)
    assert splits.default_split_bytes([1000 * mb], 2, 2, unit) == (500 * mb // 8, 0)
    assert splits.default_split_bytes([1000], 2, 2, 100) == (4096, 0)  # never below 4 KB
    assert splits.default_split_bytes([250 * mb], 2, 2) == (125 * mb, 0)


def test_sparks_file_paths_and_local_paths_name_the_same_file():
    assert splits.canonical_file("file:/tmp/dir%20with%20space%20%C3%BC/f.csv") == "/tmp/dir with space ü/f.csv"
    assert splits.canonical_file("file:///tmp/a.csv") == "/tmp/a.csv"
    assert splits.canonical_file("/tmp/a.csv") == "/tmp/a.csv"
    assert splits.canonical_file("hdfs://nn:8020/x/a.csv") == "hdfs://nn:8020/x/a.csv"


def test_ledger_records_round_trip_and_the_latest_entry_wins():
    u = Unit("/in/a.csv", 100, 100, 1, 2)
    e = ledger.Entry("orders", u, 300, 17, "run-2", "run-1", "exactly-once", 10, 9, 8, 1, 4000, 7, 1)
    assert ledger.Entry.from_record(*e.record()) == e
    assert e.key() == b'["orders","/in/a.csv",100,100,1,2]'
    older = ledger.Entry("orders", u, 300, 17, "run-1", "run-1", "exactly-once", rows_sent=3)
    assert ledger.latest([older, e]) == {("orders", u): e}
    assert e.matches(300, 17) and not e.matches(301, 17)
    assert e.row()["split_start"] == 100 and e.row()["part"] == 1


def test_a_ledger_records_kind_is_its_header_or_for_older_records_its_keys_json():
    e = ledger.Entry("orders", Unit("/in/a.csv", 0, 100), 300, 17, "run-2", "run-1", "exactly-once")
    key, value = e.record()
    claim_key, superseded_key = b'{"lock":"orders","run":"r"}', b'{"superseded":"r"}'
    assert ledger.kind_of(key, ledger.kind_headers(ledger.ENTRY)) == ledger.ENTRY
    assert ledger.kind_of(claim_key, [("other", b"x"), *ledger.kind_headers(ledger.CLAIM)]) == ledger.CLAIM
    # Written before the header: told by the key's JSON, laid out however its writer chose.
    assert ledger.kind_of(key, None) == ledger.ENTRY
    assert ledger.kind_of(b'{ "lock" : "orders", "run": "r"}', None) == ledger.CLAIM
    assert ledger.kind_of(b'{"run": "r", "lock": "orders"}', []) == ledger.CLAIM
    assert ledger.kind_of(superseded_key, None) == ledger.SUPERSEDED
    assert ledger.kind_of(b"not json", None) == ledger.kind_of(b'{"x": 1}', None) == "unknown"
    record = ledger.Record(5, key, value, 0, ledger.ENTRY)
    assert ledger.entry_of(record) == e
    # A kind this version does not know, and another kind's record, are not entries; an
    # entry that is not one fails the read, naming where it is, rather than being misread.
    assert ledger.entry_of(record._replace(kind="checkpoint")) is None
    assert ledger.entry_of(record._replace(kind=ledger.CLAIM)) is None
    assert ledger.entry_of(record._replace(value=None)) is None  # deleted
    with pytest.raises(KafkaUnavailable, match="offset 5 says it is an entry"):
        ledger.entry_of(record._replace(key=claim_key))


def test_the_modes_each_sink_keeps_and_what_rules_exactly_once_out():
    ok = {"acks": "all", "enable.idempotence": "true"}
    assert resolve_mode(None, "confluent", ok) == DEFAULT_MODE
    assert resolve_mode(None, "spark", ok) == "at-least-once"
    assert resolve_mode(None, "confluent", {**ok, "acks": "1"}) == "at-least-once"
    with pytest.raises(UsageError, match=r"spark sink .* --sink confluent or --sink kafka-python"):
        resolve_mode("exactly-once", "spark", ok)
    with pytest.raises(UsageError, match="needs acks=all"):
        resolve_mode("exactly-once", "kafka-python", {**ok, "acks": "1"})
    with pytest.raises(UsageError, match=r"spark\.speculation=true"):
        delivery.check_spark("exactly-once", "true")
    delivery.check_spark("at-least-once", "true")


def test_a_units_transactional_id_is_a_function_of_the_unit_and_the_scope_alone():
    topic_a, topic_ab = delivery.scope_prefix("a", "r1", True), delivery.scope_prefix("a.b", "r1", True)
    lineage = delivery.scope_prefix("a", "r1", False)
    assert topic_a == "kappa-ingest.topic:a:" and lineage == "kappa-ingest.run:r1:"
    assert not topic_ab.startswith(topic_a)  # listing one scope's ids never takes another's
    # Every run of a topic's incremental scope names a unit alike, whichever run it is.
    assert delivery.scope_prefix("a", "r2", True) == topic_a
    u = Unit("/in/x.csv", 0, 64 << 20)
    assert delivery.unit_id(topic_a, u) == delivery.unit_id(topic_a, Unit("/in/x.csv", 0, 64 << 20))
    others = [
        Unit("/in/x.csv", 64 << 20, 64 << 20),
        Unit("/in/y.csv", 0, 64 << 20),
        Unit("/in/x.csv", 0, 64 << 20, 1, 2),
    ]
    ids = {delivery.unit_id(topic_a, v) for v in [u, *others]} | {delivery.unit_id(lineage, u)}
    assert len(ids) == 5 and all(i.startswith("kappa-ingest.") for i in ids)
    assert delivery.part_id(topic_a, 1, 4) == "kappa-ingest.topic:a:p:4:1"


def test_which_entries_count_as_delivered_depends_on_the_scope_and_the_files_version():
    unit = Unit("/in/x.csv", 0, 10)
    task = delivery.TaskDelivery("exactly-once", "r2", "r1", "t", "_l", {}, {"/in/x.csv": (10, 5, "")})
    same_lineage = ledger.Entry("t", unit, 10, 5, "r1", "r1", "exactly-once")
    other_run = ledger.Entry("t", unit, 10, 5, "other", "other", "exactly-once")
    older_file = ledger.Entry("t", unit, 9, 4, "r1", "r1", "exactly-once")
    assert task.delivered(same_lineage) and not task.delivered(other_run) and not task.delivered(older_file)
    incremental_or_resumed = replace(task, any_run=True)
    assert incremental_or_resumed.delivered(other_run) and not incremental_or_resumed.delivered(older_file)
    assert not task.delivered(None)
    # An object is also its ETag: overwritten within the second its time is kept to, with
    # the same size, it is another object.
    obj = Unit("s3://b/x.csv", 0, 10)
    on_store = replace(task, files={"s3://b/x.csv": (10, 5000, "etag-2")})
    assert on_store.delivered(ledger.Entry("t", obj, 10, 5000, "r1", "r1", "exactly-once", file_version="etag-2"))
    assert not on_store.delivered(ledger.Entry("t", obj, 10, 5000, "r1", "r1", "exactly-once", file_version="etag-1"))


def test_one_rule_says_which_entries_count_as_delivered():
    """Before the run (--resume, --incremental read the ledger) and in its tasks
    (TaskDelivery.delivered): any run's entry counts for them, for a plain run its lineage's."""
    unit = Unit("/in/x.csv", 0, 10)
    other = ledger.Entry("t", unit, 10, 5, "other", "other", "exactly-once")
    assert delivery.counts_as_delivered(other, 10, 5, None) and not delivery.counts_as_delivered(other, 10, 5, "r1")
    assert not delivery.counts_as_delivered(other, 10, 6, None)  # the file changed since
    assert not delivery.counts_as_delivered(other, 10, 5, None, "etag")  # an object, not that file


def test_the_transaction_timeout_covers_the_longest_task_within_the_brokers_maximum():
    mb = 1 << 20
    # 40 MB at the floor rate (4 MB/s) is 10 s: a minute, the floor of the timeout.
    assert delivery.transaction_timeout_ms(40 * mb, False, None, 500, 900_000) == 60_000
    # 1 GB is 256 s: twice that.
    assert delivery.transaction_timeout_ms(1024 * mb, False, None, 500, 900_000) == 512_000
    # Throttled: 1M rows at 1,000 rows/s per task is 1,000 s, longer than the brokers allow.
    with pytest.raises(UsageError, match=r"at least 2x more --partitions"):
        delivery.transaction_timeout_ms(500 * mb, False, 1000, 500, 900_000)
    with pytest.raises(UsageError, match=r"exceeds the brokers. transaction\.max\.timeout\.ms"):
        delivery.transaction_timeout_ms(mb, False, None, 500, 900_000, requested_ms=1_000_000)
    assert delivery.transaction_timeout_ms(mb, False, None, 500, 900_000, requested_ms=120_000) == 120_000


def lines(rows: list[tuple[str, int, int]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([b"x"] * len(rows)), pa.array([f for f, _, _ in rows]), pa.array([s for _, s, _ in rows]),
         pa.array([n for _, _, n in rows])],
        names=[LINE_COL, FILE_COL, BLOCK_COL, BLOCK_LEN_COL],
    )  # fmt: skip


def test_a_batch_is_cut_where_the_split_changes_and_grouped_first_when_shuffled():
    batch = lines([("file:/a.csv", 0, 10)] * 3 + [("file:/a.csv", 10, 5)] * 2 + [("file:/b.csv", 0, 7)])
    assert [(f, s, n, b.num_rows) for f, s, n, b, _ in segments(batch)] == [
        ("file:/a.csv", 0, 10, 3), ("file:/a.csv", 10, 5, 2), ("file:/b.csv", 0, 7, 1)]  # fmt: skip
    mixed = lines([("file:/b.csv", 0, 7), ("file:/a.csv", 0, 10), ("file:/b.csv", 0, 7), ("file:/a.csv", 10, 5)])
    assert [(f, s, b.num_rows, list(at)) for f, s, _, b, at in segments(mixed, mixed=True)] == [
        ("file:/b.csv", 0, 2, [0, 2]),
        ("file:/a.csv", 0, 1, [1]),
        ("file:/a.csv", 10, 1, [3]),
    ]  # where each row was, each split's rows in their order
    assert [list(b.column(BLOCK_COL).to_pylist()) for *_, b, _ in segments(mixed, mixed=True)] == [[0, 0], [0], [10]]


def test_a_mixed_batch_whose_splits_are_runs_already_is_cut_as_it_is():
    runs = lines([("file:/b.csv", 0, 7)] * 2 + [("file:/a.csv", 0, 10)] * 3 + [("file:/b.csv", 7, 7)])
    assert [(f, s, list(at)) for f, s, _, _, at in segments(runs, mixed=True)] == [
        ("file:/b.csv", 0, [0, 1]), ("file:/a.csv", 0, [2, 3, 4]), ("file:/b.csv", 7, [5])]  # fmt: skip


def encoded(values: list[str]) -> Encoded:
    n = len(values)
    return Encoded(None, pa.array(values, pa.binary()), pa.array(range(n), pa.int64()), pa.array(["f"] * n))


def test_pieces_encoded_apart_are_put_back_in_their_rows_order():
    a, b = encoded(["r0", "r2", "r3"]), encoded(["r1", "r4"])
    merged = Encoded.merge([a, b], [np.array([0, 2, 3]), np.array([1, 4])])
    assert merged.values.to_pylist() == [b"r0", b"r1", b"r2", b"r3", b"r4"]
    assert merged.timestamps_ms.to_pylist() == [0, 0, 1, 2, 1]
    in_runs = Encoded.merge([b, a], [np.array([0, 1]), np.array([2, 3, 4])])
    assert in_runs.values.to_pylist() == [b"r1", b"r4", b"r0", b"r2", b"r3"]
    assert Encoded.merge([a], [np.array([3, 5, 9])]) is a  # a batch of one run: nothing to put back


def test_a_task_drops_units_delivered_before_found_delivered_or_taken_over():
    done, earlier, taken = Unit("/a.csv", 10, 5), Unit("/b.csv", 0, 7), Unit("/c.csv", 0, 3)
    entry = ledger.Entry("t", earlier, 7, 1, "run", "run", "exactly-once", rows_sent=1)
    asked: list[Unit] = []

    def admit(unit: Unit):
        asked.append(unit)
        return {earlier: entry, taken: DROP}.get(unit)

    task = TaskInput(0, skip=frozenset({done}), admit=admit)
    batch = lines([("file:/a.csv", 0, 10)] * 3 + [("file:/a.csv", 10, 5)] * 2 + [("file:/b.csv", 0, 7)]
                  + [("file:/c.csv", 0, 3)] * 2)  # fmt: skip
    assert [(u, b.num_rows) for u, b in task.units(iter([batch]))] == [(Unit("/a.csv", 0, 10), 3)]
    assert asked == [Unit("/a.csv", 0, 10), earlier, taken]  # a unit delivered before is not asked about
    assert task.lines_dropped == 5 and task.inherited == {earlier: entry} and task.dropped == {taken}


def test_rows_committed_by_an_attempt_spark_saw_fail_count_as_sent_once():
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 11, 23, tzinfo=UTC)
    failed = TaskInfo(1, 3, 0, 0, 0, "1", "h", "FAILED", t0, 1.0, 0, "executor lost")
    retry = TaskInfo(2, 3, 0, 0, 1, "2", "h", "SUCCESS", t0 + timedelta(seconds=2), 1.0, 15, None)
    stage = StageInfo(3, 0, "collect", "COMPLETE", 1, t0, t0 + timedelta(seconds=4), 2.0, 1.0, 0, 15)
    # The retry sent 9 rows of one split; an earlier attempt had committed 5 rows of another (6 lines).
    stats = TaskStats(2, 3, 0, 1, "h", rows_read=9, rows_sent=9, lines_dropped=6)
    inherited = ledger.Entry("t", Unit("/a.csv", 0, 10), 10, 1, "r", "r", "exactly-once", 6, 5, 5, 0, 500)
    report = RunReport("r", "confluent", "t", {})
    report.delivery["mode"] = "exactly-once"
    report.add_run([stats], SparkRunMetrics([stage], [failed, retry], {}), [inherited])
    report.check_counts()
    assert report.rows_sent == 14 and report.rows_read == 14 and report.consistent, report.checks
    assert report.delivery["transactions_aborted"] == 1
    assert report.delivery["committed_by_failed_attempts"] == {"units": 1, "rows": 5}
    assert report.delivery["transactions_committed"] == 1  # the failed attempt's, not only the retry's (none)
    assert Counter(c["name"].split(" ")[0] for c in report.checks)["executors'"] == 1


def test_a_tail_of_the_ledger_refuses_to_start_from_nowhere():
    """A task's reading of the ledger begins where the run's ended; with no start it would
    read nothing, and send again a unit another writer committed meanwhile."""
    with pytest.raises(ValueError, match="no start offsets"):
        ledger.Tail({"bootstrap.servers": "127.0.0.1:1"}, "_ledger", "t", {})


def test_shares_are_cut_into_units_only_where_a_task_reads_its_splits_one_after_another():
    from types import SimpleNamespace

    from kappa_ingest.source import dataframe
    from kappa_ingest.source.splits import InputFile, Plan

    mb = 1 << 20
    cfg = SimpleNamespace(partitions=4, multiline=False, escape='"', quote='"', encoding="utf-8",
                          event_time_column=None, order_by_event_time=False, replay_speed=None)  # fmt: skip
    big = Plan((InputFile("/a.csv", 1000 * mb, 1, True),), 250 * mb)
    assert dataframe._units_within_shares(cfg, big, ["/a.csv"])
    # A gzipped file is one split: three shares' splits for four tasks, whose lines are shuffled into parts.
    mixed = Plan((InputFile("/a.csv.gz", 700 * mb, 1, False), InputFile("/b.csv", 300 * mb, 1, True)), 250 * mb)
    assert not dataframe._units_within_shares(cfg, mixed, ["/a.csv.gz", "/b.csv"])
    ordered = SimpleNamespace(**{**vars(cfg), "event_time_column": "ts", "order_by_event_time": True})
    assert not dataframe._units_within_shares(ordered, big, ["/a.csv"])
    assert not dataframe._units_within_shares(SimpleNamespace(**{**vars(cfg), "multiline": True}), big, ["/a.csv"])
    assert not dataframe._units_within_shares(SimpleNamespace(**{**vars(cfg), "partitions": None}), big, ["/a.csv"])
