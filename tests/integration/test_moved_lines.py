"""Raw lines shuffled or sorted before they are parsed (kappa_ingest.source.line_shuffle): an
ordered replay and more producers than splits stay on the line path, and make the same
records, in the same order where order is asked, as Spark's CSV reader doing the same."""

from __future__ import annotations

import csv
import gzip
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from helpers import expected_rows, high_watermarks, rows, run

pytestmark = pytest.mark.integration

EVENTS = ["2020-05-06T07:08:09.123Z", "2020-05-06 07:08:09", "2020-05-06T07:08:08+01:00", "2020-05-06T07:09:00Z",
          "2020-13-01T00:00:00", "", "NA"]  # fmt: skip


def _files(tmp_path, n: int) -> list[str]:
    """Two files of one table whose columns come in different orders (one with a BOM), a
    few ragged lines among them. (No unbalanced quote: Spark's reader, made to read here
    by --multiline, would read on past its line.)"""
    rnd = random.Random(5)
    paths = []
    for name, columns, bom in (("a.csv", ["id", "ev", "k", "v"], False), ("b.csv", ["k", "v", "id", "ev"], True)):
        path = tmp_path / name
        with open(path, "w", newline="", encoding="utf-8-sig" if bom else "utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(columns)
            for i in range(n):
                row = {"id": f"{name}-{i}", "ev": rnd.choice(EVENTS), "k": rnd.choice(["a", "b", "é", ""]),
                       "v": rnd.choice(['x, "y"', "", "plain", "NA"])}  # fmt: skip
                if i % 997 == 5:
                    f.write(f"{row['id']},ragged\n")
                else:
                    w.writerow([row[c] for c in columns])
        paths.append(str(path))
    return paths


def _records(records) -> Counter:
    blank = re.compile(rb'^\{"ingest_ts":"[^"]*"')
    return Counter((r.key, blank.sub(b'{"ingest_ts":""', r.raw_value), r.timestamp_ms) for r in records)


def _in_event_time_order_per_key(records) -> bool:
    seen: dict[tuple[int, bytes | None], list[int]] = defaultdict(list)
    for r in records:  # each partition's records in offset order
        seen[(r.partition, r.key)].append(r.timestamp_ms)
    return all(times == sorted(times) for times in seen.values())


@pytest.mark.parametrize("packed", [False, True], ids=["lines moved by offset", "gzip: lines moved whole"])
def test_an_ordered_replay_stays_on_the_line_path_with_sparks_records_and_order(spark, kafka, tmp_path, packed):
    paths = _files(tmp_path, 4000)
    if packed:  # Spark's scan reads a .gz file, and its lines move with their text
        for p in paths:
            Path(p + ".gz").write_bytes(gzip.compress(Path(p).read_bytes()))
        paths = [p + ".gz" for p in paths]
    options = dict(inputs=paths, null_values=("NA",), key_column="k", event_time_column="ev",
                   order_by_event_time=True, partitions=3, topic_partitions=2, sink="confluent")  # fmt: skip
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "700")  # a split's lines over several batches
    try:
        _, lines, by_lines = run(spark, kafka, tmp_path, topic=f"moved-ordered-lines-{packed}", **options)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    _, sparks, by_spark = run(spark, kafka, tmp_path, topic=f"moved-ordered-spark-{packed}", multiline=True, **options)
    assert lines["read_path"] == "lines" and sparks["read_path"] == "spark-csv"
    assert lines["tasks"] and len(lines["tasks"]) == 3
    # Local files: the tasks read the lines, Spark's JVM none (it hands each task its number and
    # moves offsets); gzip: Spark's scan reads them.
    scanned = sum(s["input_records"] for s in lines["stages"])
    assert scanned == 8002 if packed else all(s["input_records"] <= s["num_tasks"] for s in lines["stages"])
    # Marks are moved by an RDD's Python tasks (Source.places), their map stage named for it;
    # lines with their text through Spark's shuffle and mapInArrow.
    assert any(s["name"] == "lines marked and moved" for s in lines["stages"]) != packed
    assert _records(by_lines) == _records(by_spark)
    assert lines["quarantine"]["reasons"] == sparks["quarantine"]["reasons"]
    assert lines["rows_read"] == sparks["rows_read"] == 8000
    assert all(c["ok"] for c in lines["checks"]), [c for c in lines["checks"] if not c["ok"]]
    assert _in_event_time_order_per_key(by_lines) and _in_event_time_order_per_key(by_spark)
    ids = [r.value["data"]["id"] for r in by_lines]
    assert len(ids) == len(set(ids)) and not any(i in ("id", "\ufeffk") for i in ids), "a header was sent"
    # Ties in event time keep the file's order.
    ties = [r.value["data"]["id"] for r in by_lines if r.value["event_ts"] == "2020-05-06T07:08:09.000Z"
            and r.key == b"a" and r.value["data"]["id"].startswith("a.csv")]  # fmt: skip
    assert ties == sorted(ties, key=lambda i: int(i.split("-")[1]))


def test_more_producers_than_splits_shuffle_raw_lines(spark, kafka, tmp_path):
    paths = _files(tmp_path, 3000)
    packed = tmp_path / "b.csv.gz"  # one split: gzip is read from its start
    packed.write_bytes(gzip.compress(Path(paths[1]).read_bytes()))
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(packed)], partitions=5, sink="confluent")
    assert summary["read_path"] == "lines" and summary["plan"]["parts"] == 5
    assert len(summary["tasks"]) == 5 and all(t["rows"] > 0 for t in summary["tasks"])
    assert all(c["ok"] for c in summary["checks"]), [c for c in summary["checks"] if not c["ok"]]
    assert rows(records) == expected_rows(paths[1])  # the BOM'd header skipped wherever its line went
    assert summary["rows_read"] == 3000


@pytest.mark.parametrize(("parts", "topic_partitions", "multiline"), [(2, 4, False), (4, 2, False), (3, 2, True)],
                         ids=["2 parts, 4 partitions", "4 parts, 2 partitions", "Spark's reader"])  # fmt: skip
def test_an_ordered_replays_tasks_each_send_to_their_own_partitions(
    spark, kafka, tmp_path, parts, topic_partitions, multiline
):
    """A line's part is the partition Kafka's partitioner gives its record's key among the
    parts, so each transaction writes only its own partitions: one commit marker for each
    partition, where parts by any other hash put one in every partition from every task.
    A typed key is parted as the record's key: "007", "07" and "7" are the key "7", whose
    rows are then in one task, and its history in event-time order in its partition (on
    Spark's reader too, parted there by the key's typed value)."""
    from kafka.partitioner.default import murmur2

    path, topic = tmp_path / "keyed.csv", f"own-partitions-{parts}"
    rnd = random.Random(parts)
    with open(path, "w") as f:
        f.write("id,ev,k\n")
        for i in range(6000):
            k = rnd.randrange(60)
            f.write(
                f"{i},2020-05-06T07:{rnd.randrange(60):02d}:{rnd.randrange(60):02d}Z,{rnd.choice(['', '0', '00'])}{k}\n"
            )
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], schema="id INT, ev STRING, k INT",
                              key_column="k", event_time_column="ev", order_by_event_time=True, partitions=parts,
                              topic_partitions=topic_partitions, sink="confluent", topic=topic, multiline=multiline)  # fmt: skip
    assert (summary["read_path"], summary["plan"]["parts_by"]) == (
        ("spark-csv", "key-values") if multiline else ("lines", "kafka-keys"))  # fmt: skip
    assert sorted(r.value["data"]["id"] for r in records) == list(range(6000))
    assert {r.key for r in records} == {str(k).encode() for k in range(60)}
    assert all(r.partition == (murmur2(r.key) & 0x7FFFFFFF) % topic_partitions for r in records)
    assert _in_event_time_order_per_key(records)
    assert all(c["ok"] for c in summary["checks"]), [c for c in summary["checks"] if not c["ok"]]
    if not multiline:
        per_partition = Counter(r.partition for r in records)
        markers = {p: end - per_partition[p] for p, end in high_watermarks(kafka.bootstrap_servers, topic).items()}
        assert markers == dict.fromkeys(range(topic_partitions), max(1, parts // topic_partitions))


def test_sparks_reader_sorts_zone_less_times_as_utc_in_a_session_of_another_zone(spark, kafka, tmp_path):
    """kappa-ingest reads a time without a zone as UTC, and stamps the records so; Spark's
    reader sorts (and parts a TIMESTAMP key) by Spark's own parse, which reads it in the
    session's zone. A notebook's session in New York, whose clocks skipped from 02:00 to
    03:00 on 2012-03-11, read 02:30 as 03:30: sorted after 03:15, out of the order of the
    records' timestamps; with TIMESTAMP_NTZ, 04:00+05:00 as 04:00. The plan is made with
    the session in UTC, its timestamps with a zone."""
    path = tmp_path / "dst.csv"
    times = ["01:50:00", "02:30:00", "03:15:00", "02:45:00", "03:05:00Z", "02:10:00", "03:40:00", "04:00:00+05:00"]
    path.write_text("id,ev,k\n" + "".join(f"{i},2012-03-11 {t},2012-02-22 00:00:00{'Z' if i % 2 else ''}\n"
                                            for i, t in enumerate(times)))  # fmt: skip
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    spark.conf.set("spark.sql.timestampType", "TIMESTAMP_NTZ")  # (offsets ignored by Spark's parse)
    try:
        _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], schema="id INT, ev STRING, k TIMESTAMP",
                                  key_column="k", event_time_column="ev", order_by_event_time=True, partitions=2,
                                  sink="confluent", topic="zone-less-in-new-york", multiline=True)  # fmt: skip
        assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"  # the session's own, after
        assert spark.conf.get("spark.sql.timestampType") == "TIMESTAMP_NTZ"
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.unset("spark.sql.timestampType")
    assert summary["read_path"] == "spark-csv" and len(records) == len(times)
    assert {r.key for r in records} == {b"2012-02-22T00:00:00.000Z"}  # one key, from either text
    stamps = [r.timestamp_ms for r in sorted(records, key=lambda r: r.offset)]
    assert stamps == sorted(stamps), [r.value["data"]["id"] for r in sorted(records, key=lambda r: r.offset)]


def test_a_resumed_ordered_replay_keeps_the_parts_its_original_was_planned_with(spark, tmp_path):
    """A run planned before the parts followed the record's key (parts_by "lines", or on
    Spark's reader "rows") is resumed with its keys parted as they were then: by a hash of
    the key's text."""
    from dataclasses import replace

    from kappa_ingest import config
    from kappa_ingest.errors import UsageError
    from kappa_ingest.source import dataframe, splits

    paths = _files(tmp_path, 200)
    cfg = config.validate({"inputs": paths, "topic": "t", "bootstrap_servers": "127.0.0.1:9", "key_column": "k",
                           "event_time_column": "ev", "order_by_event_time": True, "partitions": 3,
                           "metrics_dir": str(tmp_path / "m")})  # fmt: skip
    fresh = dataframe.read(spark, cfg)
    assert fresh.plan.parts_by == splits.BY_KEYS and fresh.plan.parts == 3
    for by, column in ((splits.BY_LINES, "__kappa_key"), (splits.BY_KEYS, "__kappa_part")):
        resumed = dataframe.read(spark, cfg, replace(fresh.plan, parts_by=by))
        assert resumed.plan.parts_by == by and resumed.plan.parts == 3
        shuffle = resumed.df._jdf.queryExecution().executedPlan().toString()
        assert f"hashpartitioning({column}" in shuffle, shuffle
    # On Spark's reader, a typed key: by its value (before: by its text).
    cfg = replace(cfg, multiline=True, schema="id STRING, ev STRING, k INT, v STRING")
    fresh = dataframe.read(spark, cfg)
    assert fresh.plan.parts_by == splits.BY_KEY_VALUES
    # ("": a plan from before parts_by was recorded: Spark's rows'.)
    for by, parted in (("", "hashpartitioning(k#"), (splits.BY_ROWS, "hashpartitioning(k#"),
                       (splits.BY_KEY_VALUES, "hashpartitioning(try_cast(k#")):  # fmt: skip
        resumed = dataframe.read(spark, cfg, replace(fresh.plan, parts_by=by))
        assert resumed.plan.parts_by == (by or splits.BY_ROWS)
        assert parted in resumed.df._jdf.queryExecution().executedPlan().toString()
    # Parts this reader cannot make again (another path's, a later version's) are refused.
    for by in (splits.BY_KEYS, "parts of a later version"):
        with pytest.raises(UsageError, match=f"parted by '{by}', which Spark's CSV reader does not part by here"):
            dataframe.read(spark, cfg, replace(fresh.plan, parts_by=by))


@pytest.mark.parametrize("parts", [2, 4])  # a line that does not parse: part 0 of 2, 2 of 4
def test_an_ordered_replays_places_moved_by_python_tasks_are_sparks_parts_in_sparks_order(
    spark, tmp_path, monkeypatch, parts
):
    """Python tasks moving and sorting an ordered replay's places (``Source.places``) hand
    each sending task the rows Spark's own shuffle and sort of the same marks would: every
    line in the same part (lines that do not parse and empty keys among them), in the same
    order (ties in event time in file order), in batches of the row cap. Beyond the input a
    part may sort in memory, the run keeps Spark's sort."""
    from kappa_ingest import config
    from kappa_ingest.sinks.partition_runner import arrow_batches, sql_settings_in_tasks
    from kappa_ingest.source import dataframe, line_shuffle

    assert line_shuffle.SPARK_HASH_SEED % parts == 42 % parts == 2 % parts  # a null's part: 0 of 2, 2 of 4
    paths = _files(tmp_path, 3000)
    cfg = config.validate({"inputs": paths, "topic": "t", "bootstrap_servers": "127.0.0.1:9", "key_column": "k",
                           "event_time_column": "ev", "order_by_event_time": True, "partitions": parts,
                           "null_values": ["NA"], "metrics_dir": str(tmp_path / "m")})  # fmt: skip
    source = dataframe.read(spark, cfg)
    assert source.places is not None

    def rows_of(batches):
        yield [r for b in batches for r in b.to_pylist()]

    with sql_settings_in_tasks(spark, map_stages="places moved"):
        by_spark = arrow_batches(source.df).mapPartitions(rows_of).collect()
        by_python = source.places(700).mapPartitions(rows_of).collect()
        sizes = source.places(700).mapPartitions(lambda bs: [[b.num_rows for b in bs]]).collect()
    assert len(by_python) == parts and sum(map(len, by_python)) == 6000 + 2  # the headers' lines too
    assert by_python == by_spark
    # a.csv's ragged lines do not parse, and have no key: Spark's part of a null.
    ragged, at = set(), 0
    a_splits = [(i, s, s + n) for i, (f, s, n) in enumerate(source.parser.splits) if f.endswith("/a.csv")]
    for line in Path(paths[0]).read_bytes().splitlines(keepends=True):
        if b",ragged" in line:  # a line is its split's where it begins
            ragged.add(next((i, at) for i, lo, hi in a_splits if lo <= at < hi))
        at += len(line)
    marks = [
        (int.from_bytes(r["__kappa_mark"][:4]), int.from_bytes(r["__kappa_mark"][4:12])) for r in by_python[2 % parts]
    ]
    assert len(ragged) >= 3 and ragged <= set(marks), "the lines that do not parse were not in Spark's part of a null"
    assert sum(map(sum, sizes)) == 6002  # a part no key falls in has no batch
    assert all(s[:-1] == [700] * (len(s) - 1) and 0 < s[-1] <= 700 for s in sizes if s)
    monkeypatch.setattr(line_shuffle, "PYTHON_SORT_BYTES", 1)
    assert dataframe.read(spark, cfg).places is None
