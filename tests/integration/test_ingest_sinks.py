"""Each sink, end to end against the real broker: every CSV row is one record, in the
contract's format, and the report's numbers equal what a consumer reads back."""

from __future__ import annotations

import json

import pytest

from helpers import csv_rows, iso_ms_to_epoch, run
from kappa_ingest import datagen

pytestmark = pytest.mark.integration
SINKS = ["confluent", "spark", "kafka-python"]

# RFC 4180 edge cases: BOM, CRLF, quoted delimiters, doubled quotes, quoted newline is NOT
# here (single-line mode quarantines it; see the multiline test), unicode, empty fields,
# quoted empty field, spaces kept, a ragged row (too few) and one too wide.
EDGE_CASES = (
    "\ufeffid,name,note,amount\r\n"
    '1,"Smith, John","said ""hi""",10.5\r\n'
    "2,Zürich,naïve café — ✓,\r\n"
    '3,,"",0\r\n'
    "4, padded , x ,-1\r\n"
    "5,only-two\r\n"
    "6,a,b,c,d\r\n"
    '7,"quote "" inside",emoji 🎉,7\r\n'
    "\r\n"
    "8,last,row,8\r\n"
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    edge = d / "edge.csv"
    edge.write_bytes(EDGE_CASES.encode("utf-8"))
    wide = datagen.generate("wide30", 3000, d / "wide30.csv", seed=7)
    return {"edge": edge, "wide": wide}


# Each sink in each delivery mode it has, on the edge cases: run once for the module.
DELIVERIES = [("confluent", "exactly-once"), ("confluent", "at-least-once"), ("kafka-python", "exactly-once"),
              ("spark", "at-least-once")]  # fmt: skip


@pytest.fixture(scope="module")
def edge_runs(spark, kafka, inputs, tmp_path_factory):
    out = {}
    for sink, mode in DELIVERIES:
        tmp = tmp_path_factory.mktemp(f"{sink}-{mode}")
        out[(sink, mode)] = run(spark, kafka, tmp, inputs=[str(inputs["edge"])], sink=sink, delivery=mode,
                                key_column="id")  # fmt: skip
    return out


@pytest.mark.parametrize(("sink", "mode"), DELIVERIES)
def test_every_row_once_in_contract_format(edge_runs, inputs, sink, mode):
    cfg, summary, records = edge_runs[(sink, mode)]
    columns, expected, ragged = csv_rows(inputs["edge"])

    assert summary["status"] == "succeeded" and summary["delivery"]["mode"] == mode
    assert len(records) == len(expected) == summary["rows_sent"]
    assert summary["rows_quarantined"] == ragged == 2
    assert summary["rows_read"] == len(expected) + ragged
    by_key = {r.key: r for r in records}
    assert sorted(by_key) == sorted(row["id"].encode() for row in expected)
    for row in expected:
        rec = by_key[row["id"].encode()]
        assert list(rec.value) == ["ingest_ts", "source_file", "data"]
        assert list(rec.value["data"]) == columns  # header order
        assert rec.value["data"] == row
        assert rec.value["source_file"].endswith("edge.csv")
        assert rec.timestamp_ms == iso_ms_to_epoch(rec.value["ingest_ts"])
        assert rec.value["ingest_ts"].endswith("Z") and len(rec.value["ingest_ts"]) == 24
        assert rec.headers == {"run_id": cfg.run_id.encode(), "source_file": rec.value["source_file"].encode()}
    assert summary["bytes_sent"] == sum(len(r.raw_value) + len(r.key) for r in records)
    markers = summary["broker"]["offset_delta"] - len(records)
    if mode == "exactly-once":  # one commit marker per partition of the topic a transaction wrote to
        assert summary["delivery"]["transactions_committed"] >= 1
        assert 1 <= markers <= 2 * summary["delivery"]["transactions_committed"]
    else:
        assert markers == 0 and summary["delivery"]["transactions_committed"] == 0
    assert all(c["ok"] for c in summary["checks"]), summary["checks"]
    reasons = summary["quarantine"]["reasons"]
    assert reasons == {"2 fields where the header has 4": 1, "5 fields where the header has 4": 1}


def test_all_sinks_produce_the_same_data_keys_and_headers(edge_runs):
    seen = {
        delivery: {r.key: (r.value["data"], sorted(r.headers), r.value["source_file"]) for r in records}
        for delivery, (_, _, records) in edge_runs.items()
    }
    first, *others = seen.values()
    assert first and all(other == first for other in others)


@pytest.mark.parametrize("sink", SINKS)
def test_generated_file_with_report_per_executor_and_stage(spark, kafka, tmp_path, inputs, sink):
    path = inputs["wide"]
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], sink=sink, partitions=2)
    _, expected, _ = csv_rows(path)
    assert sorted(json.dumps(r.value["data"], sort_keys=True) for r in records) == sorted(
        json.dumps(row, sort_keys=True) for row in expected
    )
    assert summary["rows_sent"] == len(records) == 3000
    assert sum(e["rows"] for e in summary["executors"]) == 3000
    assert sum(t["rows"] for t in summary["tasks"] if t["status"] == "SUCCESS") == 3000
    assert {t["partition"] for t in summary["tasks"]} == {0, 1}
    # The sending stages are Spark's own, as its status tracker (a reading of its own) knows them.
    sending = [s for s in summary["stages"] if s["sends"]]
    tracker = spark.sparkContext.statusTracker()
    for s in sending:
        info = tracker.getStageInfo(s["stage_id"])
        assert info is not None and info.numTasks == s["num_tasks"] and info.numCompletedTasks == s["num_tasks"]
    for key in ("executor_id", "host", "tasks", "rows", "bytes", "busy_s", "span_s", "rows_per_s", "mb_per_s"):
        assert key in summary["executors"][0]
    assert all(c["ok"] for c in summary["checks"]), summary["checks"]


@pytest.mark.parametrize(("sink", "mode"), DELIVERIES)
def test_a_key_lands_in_the_partition_javas_partitioner_gives_it(edge_runs, sink, mode):
    """Every sink partitions keys as Kafka's Java clients do (murmur2), so a topic written by
    kappa-ingest is co-partitioned with what Java producers and Kafka Streams write."""
    from kafka.partitioner.default import murmur2

    _, summary, records = edge_runs[(sink, mode)]
    partitions = summary["config"]["topic_partitions"]
    assert {r.partition for r in records} == set(range(partitions))
    assert all(r.partition == (murmur2(r.key) & 0x7FFFFFFF) % partitions for r in records)


@pytest.mark.parametrize(("sink", "mode"), DELIVERIES)
def test_a_topic_the_run_creates_takes_the_largest_batches_its_sink_sends(kafka, edge_runs, sink, mode):
    """A batch must hold a round trip's records on a long link (docs/lab.md): the run gives
    the topic it creates room for 16 MB batches, the confluent sink's, and a record larger
    than the producer's max.request.size is still quarantined (records too large)."""
    from kappa_ingest.kafka.topics import Admin
    from kappa_ingest.source import record_size

    cfg, summary, _ = edge_runs[(sink, mode)]
    with Admin(kafka.bootstrap_servers) as admin:
        assert admin.topic_setting(cfg.topic, "max.message.bytes") == str(record_size.BATCH_BYTES)
    # The confluent sink's batches: its default, within the topic's room (less its framing).
    framed = record_size.BATCH_BYTES - record_size.FRAMING_BYTES
    assert summary["broker"]["batch_bytes"] == (framed if sink == "confluent" else 1024 * 1024)
    assert summary["broker"]["max_record_bytes"] == (1_000_000 if sink == "confluent" else 1_048_576)
