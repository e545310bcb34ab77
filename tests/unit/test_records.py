"""Record conversion (contract §2), checked against values written out by hand."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
from chispa import assert_df_equality
from pyspark.sql import functions as F

from kappa_ingest.source.columns import EVENT_TS_COL, FILE_COL
from kappa_ingest.source.records import RecordSpec, encode_batch, iso_ms, to_records

NOW = 1_795_305_599_123  # 2026-11-21T23:59:59.123Z
FILE = "file:/data/orders.csv"


def batch(**columns) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({**columns, FILE_COL: [FILE] * len(next(iter(columns.values())))})


def test_iso_ms_is_utc_with_milliseconds():
    assert iso_ms(NOW) == "2026-11-21T23:59:59.123Z"
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z"


def test_value_layout_order_nulls_and_escaping():
    b = batch(id=["1", "2"], name=['Smith, "J"', None], note=["é\n\t\\", ""])
    enc = encode_batch(b, RecordSpec(("id", "name", "note"), "run"), NOW)
    values = [v.decode() for v in enc.values.to_pylist()]
    assert values[0] == (
        '{"ingest_ts":"2026-11-21T23:59:59.123Z","source_file":"file:/data/orders.csv",'
        '"data":{"id":"1","name":"Smith, \\"J\\"","note":"é\\n\\t\\\\"}}'
    )
    assert json.loads(values[1])["data"] == {"id": "2", "name": None, "note": ""}
    assert enc.keys is None
    assert enc.timestamps_ms.to_pylist() == [NOW, NOW]
    assert enc.nbytes == sum(len(v.encode()) for v in values)


def test_key_column_and_key_bytes_counted():
    enc = encode_batch(batch(id=["k1", None], v=["x", "y"]), RecordSpec(("id", "v"), "run", key_column="id"), NOW)
    assert enc.keys.to_pylist() == [b"k1", None]
    assert enc.nbytes == sum(len(v) for v in enc.values.to_pylist()) + 2


def test_event_time_sets_timestamp_and_event_ts():
    ts = datetime(2012, 2, 22, 0, 0, 1, 500000, tzinfo=UTC)
    b = pa.RecordBatch.from_pydict(
        {"ts": ["x"], FILE_COL: [FILE], EVENT_TS_COL: pa.array([ts], pa.timestamp("us", tz="UTC"))}
    )
    enc = encode_batch(b, RecordSpec(("ts",), "run", event_time=True), NOW)
    value = json.loads(enc.values[0].as_py())
    assert list(value) == ["ingest_ts", "event_ts", "source_file", "data"]
    assert value["event_ts"] == "2012-02-22T00:00:01.500Z"
    assert enc.timestamps_ms.to_pylist() == [int(ts.timestamp() * 1000)]


def test_typed_values_are_json_numbers_booleans_and_iso_times():
    b = pa.RecordBatch.from_pydict(
        {
            "n": pa.array([3, None], pa.int32()),
            "x": pa.array([1.5, 2.0]),
            "ok": pa.array([True, False]),
            "at": pa.array([datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC")),
            FILE_COL: [FILE, FILE],
        }
    )
    enc = encode_batch(b, RecordSpec(("n", "x", "ok", "at"), "run"), NOW)
    assert [json.loads(v)["data"] for v in enc.values.to_pylist()] == [
        {"n": 3, "x": 1.5, "ok": True, "at": "2026-01-02T03:04:05.000Z"},
        {"n": None, "x": 2.0, "ok": False, "at": "2026-01-02T03:04:05.000Z"},
    ]


def test_to_records_gives_sparks_kafka_sink_rows(spark):
    df = spark.createDataFrame([("1", "a"), ("2", None)], "id string, v string").withColumn(FILE_COL, F.lit(FILE))
    out = to_records(df, RecordSpec(("id", "v"), "r1", key_column="id"), clock=lambda: NOW)
    ts = datetime.fromtimestamp(NOW / 1000, tz=UTC).replace(tzinfo=None)

    def headers(stamp: int) -> list[tuple[str, bytearray]]:
        return [("run_id", bytearray(b"r1")), ("source_file", bytearray(FILE.encode())),
                ("__kappa_ts", bytearray(stamp.to_bytes(8, "big")))]  # fmt: skip

    def value(data: str) -> bytearray:
        return bytearray(f'{{"ingest_ts":"2026-11-21T23:59:59.123Z","source_file":"{FILE}","data":{data}}}'.encode())

    expected = spark.createDataFrame(
        [
            (bytearray(b"1"), value('{"id":"1","v":"a"}'), ts, headers(NOW)),
            (bytearray(b"2"), value('{"id":"2","v":null}'), ts, headers(NOW)),
        ],
        "key binary, value binary, timestamp timestamp, headers array<struct<key:string,value:binary>>",
    )
    assert_df_equality(out, expected, ignore_row_order=True, ignore_nullable=True)
