"""The confluent sink's two front ends to librdkafka, the C loop and confluent-kafka's
Python API (the fallback without a C compiler), put the same records in Kafka."""

from __future__ import annotations

import pyarrow as pa
import pytest

from helpers import consume_all
from kappa_ingest import native
from kappa_ingest.columns import FILE_COL
from kappa_ingest.records import RecordSpec, encode_batch
from kappa_ingest.sinks.confluent_sink import ConfluentPartitionProducer, NativePartitionProducer
from kappa_ingest.sinks.partition_runner import DeliveryFailed
from kappa_ingest.topics import Admin

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lib():
    try:
        return native.load()
    except native.NativeUnavailable as e:  # a machine without cc: the sink falls back, tested elsewhere
        pytest.skip(str(e))


def _encoded():
    n = 500
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([f"k{i}" if i % 7 else None for i in range(n)]),
            pa.array([f'text "{i}"\n' if i % 5 else None for i in range(n)]),
            pa.array([f"file:/in/{i % 3}.csv" for i in range(n)]),
        ],
        names=["id", "text", FILE_COL],
    )
    enc = encode_batch(batch, RecordSpec(("id", "text"), "run-1", key_column="id"), 1795334121513)
    return enc


def _send(producer, enc) -> None:
    producer.send(enc.slice(0, 123), "run-1")
    producer.send(enc.slice(123, enc.rows), "run-1")
    producer.flush()
    producer.close()


def test_c_loop_and_python_api_send_the_same_records(kafka, lib):
    conf = {"bootstrap.servers": kafka.bootstrap_servers, "acks": "all", "linger.ms": 5, "compression.type": "lz4"}
    admin = Admin(kafka.bootstrap_servers)
    enc = _encoded()
    seen = {}
    for name, make in [
        ("c", lambda t: NativePartitionProducer(lib, conf, t)),
        ("python", lambda t: ConfluentPartitionProducer(conf, t)),
    ]:
        topic = f"front-end-{name}"
        admin.ensure_topic(topic, 1, 1)
        _send(make(topic), enc)
        seen[name] = [
            (r.key, r.raw_value, r.timestamp_ms, r.headers) for r in consume_all(kafka.bootstrap_servers, topic)
        ]
    admin.close()
    assert len(seen["c"]) == enc.rows
    assert seen["c"] == seen["python"]
    key, _value, ts, headers = seen["c"][0]
    assert key is None and ts == 1795334121513 and headers == {"run_id": b"run-1", "source_file": b"file:/in/0.csv"}
    assert [v for _, v, _, _ in seen["c"]] == enc.values.to_pylist()


def test_c_loop_names_a_record_the_client_refuses(kafka, lib):
    conf = {"bootstrap.servers": kafka.bootstrap_servers, "message.max.bytes": 1000}
    producer = NativePartitionProducer(lib, conf, "front-end-refused")
    big = pa.RecordBatch.from_arrays([pa.array(["x" * 5000]), pa.array(["file:/big.csv"])], names=["t", FILE_COL])
    with pytest.raises(DeliveryFailed, match=r"refused a record: .*too large"):
        producer.send(encode_batch(big, RecordSpec(("t",), "run-1"), 0), "run-1")
    producer.close()


def test_c_loop_refuses_a_bad_setting(lib):
    with pytest.raises(DeliveryFailed, match=r"configuration: .*no\.such\.setting"):
        NativePartitionProducer(lib, {"no.such.setting": 1}, "t")
