"""The run report's joins and invariants, on hand-made task records."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from kappa_ingest.delivery import reconcile
from kappa_ingest.report.run import RunReport, render
from kappa_ingest.sinks.task_stats import TaskStats
from kappa_ingest.spark.metrics import SparkRunMetrics, StageInfo, TaskInfo, parse_time

T0 = datetime(2026, 11, 22, 1, 0, 0, tzinfo=UTC)


def task(tid, partition, executor, start_s, dur_s, status="SUCCESS", records=0, attempt=0):
    return TaskInfo(tid, 3, 0, partition, attempt, executor, f"host-{executor}", status,
                    T0 + timedelta(seconds=start_s), dur_s, records, None if status == "SUCCESS" else "boom")  # fmt: skip


def stats(tid, partition, rows, quarantined=0, nbytes=None, skipped=1):
    return TaskStats(tid, 3, partition, 0, "h", rows_read=rows + quarantined, rows_sent=rows,
                     rows_quarantined=quarantined, lines_skipped=skipped, bytes_sent=nbytes or rows * 100)  # fmt: skip


def metrics(tasks):
    stage = StageInfo(3, 0, "collect", "COMPLETE", len(tasks), T0, T0 + timedelta(seconds=10), 12.0, 9.0, 1000, 0)
    return SparkRunMetrics([stage], tasks, {})


def test_executor_rates_busy_and_span():
    r = RunReport("r", "confluent", "t", {})
    tasks = [task(1, 0, "1", 0, 4, records=401), task(2, 1, "1", 2, 4, records=301), task(3, 2, "2", 1, 5, records=201)]
    r.add_run([stats(1, 0, 400), stats(2, 1, 300), stats(3, 2, 200)], metrics(tasks))
    r.check_counts()
    e1, e2 = r.executors
    assert (e1["executor_id"], e1["tasks"], e1["rows"], e1["busy_s"], e1["span_s"]) == ("1", 2, 700, 8.0, 6.0)
    assert e1["rows_per_s"] == round(700 / 6, 1) and e1["mb_per_s"] == round(70_000 / 1e6 / 6, 3)
    assert (e2["rows"], e2["busy_s"], e2["span_s"]) == (200, 5.0, 5.0)
    assert r.ingest_s == 6.0 and r.rows_sent == 900 and r.rows_read == 900
    assert r.summary()["rows_per_s"] == 150.0
    assert r.consistent, r.checks


def test_spark_input_records_that_disagree_fail_the_check():
    r = RunReport("r", "confluent", "t", {})
    r.add_run([stats(1, 0, 10)], metrics([task(1, 0, "1", 0, 1, records=99)]))
    assert not r.consistent
    assert "CHECK FAILED: Spark's input records" in render(r.summary())


def test_broker_offsets_moved_by_rows_sent_balance():
    r = RunReport("r", "confluent", "t", {})
    r.add_run([stats(1, 0, 10)], metrics([task(1, 0, "1", 0, 1, records=11)]))
    delta = r.add_offsets({0: 5, 1: 0}, {0: 10, 1: 5})
    r.add_verdict(reconcile.check("at-least-once", 10, delta, 10, 0, None, "r", {}))
    assert r.broker["offset_delta"] == 10 and r.consistent
    delta = r.add_offsets({0: 0}, {0: 12})
    r.add_verdict(reconcile.check("at-least-once", 10, delta, 10, 0, None, "r", {}))
    assert not r.consistent


def test_retry_duplicates_found_by_the_read_back_are_counted_and_named():
    r = RunReport("r", "spark", "t", {})
    tasks = [task(1, 0, "1", 0, 1, status="FAILED"), task(2, 0, "1", 1, 1, records=11, attempt=1)]
    r.add_run([stats(2, 0, 10)], metrics(tasks))
    found = reconcile.ReadBack(Counter({("r", "/in/a.csv"): 14, ("other-run", "/in/a.csv"): 3}))
    r.add_verdict(reconcile.check("at-least-once", 10, 17, 10, 1, found, "r", {"/in/a.csv": 10}))
    assert r.duplicates["count"] == 4 and r.duplicates["failed_attempts"][0]["task_id"] == 1
    assert r.duplicates["by_file"] == {"/in/a.csv": 4}
    assert r.consistent
    assert "retry duplicates: 4" in render(r.summary())


def test_rest_times_parse_as_utc():
    assert parse_time("2026-11-22T00:50:12.345GMT") == datetime(2026, 11, 22, 0, 50, 12, 345000, tzinfo=UTC)


def test_rows_by_header_come_from_the_units_each_task_delivered():
    import json
    from dataclasses import asdict

    from kappa_ingest.delivery.ledger import Entry
    from kappa_ingest.source.dataframe import Header
    from kappa_ingest.source.splits import Unit

    def entry(file, rows):
        return Entry(
            "t", Unit(file, 0, 10), 10, 1, "r", "r", "at-least-once", rows + 1, rows, rows, 0, rows * 100, 1, 0
        )

    r = RunReport("r", "confluent", "t", {})
    s1, s2 = stats(1, 0, 5), stats(2, 1, 7)
    s1.units = json.dumps([asdict(entry("/in/a.csv", 2)), asdict(entry("/in/b.csv", 3))])
    s2.units = json.dumps([asdict(entry("/in/c.csv", 7))])
    r.add_run([s1, s2], metrics([task(1, 0, "1", 0, 1, records=6), task(2, 1, "1", 0, 1, records=8)]))
    headers = [Header(("id", "x"), ("/in/a.csv", "/in/c.csv")), Header(("id", "y", "z"), ("/in/b.csv",))]
    r.add_headers(headers, [s1, s2], [])
    assert [(h["columns"], h["rows"]) for h in r.headers] == [(["id", "x"], 9), (["id", "y", "z"], 3)]
    assert r.consistent, r.checks
    text = render(r.summary())
    assert "2 distinct headers, each file's rows keyed by its own:" in text
    assert "id,x: 2 files, 9 rows" in text and "id,y,z: 1 file, 3 rows" in text
