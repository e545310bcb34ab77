"""The confluent sink's two front ends to librdkafka, the C loop and confluent-kafka's
Python API (the fallback without a C compiler), put the same records in Kafka; they and
the kafka-python sink's producer keep Kafka's transactions."""

from __future__ import annotations

import socket
from collections import Counter

import pyarrow as pa
import pytest

from helpers import consume_all
from kappa_ingest import native
from kappa_ingest.config.choices import EXACTLY_ONCE
from kappa_ingest.delivery.guarantees import TaskDelivery
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.sinks.confluent import ConfluentPartitionProducer, NativePartitionProducer
from kappa_ingest.sinks.producer import DeliveryFailed, TransactionFailed
from kappa_ingest.sinks.task_stats import TaskStats
from kappa_ingest.sinks.writers import open_transactional
from kappa_ingest.source.columns import FILE_COL
from kappa_ingest.source.records import RecordSpec, encode_batch

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lib():
    return native.load()  # make test refuses to start without a C compiler: a failure here is one


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


def _front_end(name: str, bootstrap: str, **extra: str):
    """A maker of producers for one front end, transactional where given an id."""
    from kappa_ingest.kafka import settings as kafka_settings
    from kappa_ingest.sinks.kafka_python import KafkaPythonPartitionProducer

    settings = {"acks": "all", "enable.idempotence": "true", "linger.ms": "5", **extra}
    if name == "kafka-python":
        python_conf = kafka_settings.for_kafka_python(settings, bootstrap)
        return lambda topic, txid=None: KafkaPythonPartitionProducer(python_conf, topic, txid)
    conf = kafka_settings.for_confluent(settings, bootstrap)

    def with_id(txid: str | None) -> dict:
        return conf if txid is None else {**conf, "transactional.id": txid}

    if name == "c":
        lib = native.load()
        return lambda topic, txid=None: NativePartitionProducer(lib, with_id(txid), topic)
    return lambda topic, txid=None: ConfluentPartitionProducer(with_id(txid), topic)


@pytest.mark.parametrize("front", ["c", "python", "kafka-python"])
def test_a_transaction_is_all_or_nothing_and_a_new_attempt_fences_the_old(kafka, front):
    make = _front_end(front, kafka.bootstrap_servers)
    topic, ledger_topic, txid = f"txn-{front}", f"txn-ledger-{front}", f"test-{front}"
    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic(topic, 2, 1)
        admin.ensure_topic(ledger_topic, 1, 1)
    enc = _encoded()
    old = make(topic, txid)
    old.init_transactions(30)
    old.begin()
    old.send(enc.slice(0, 100), "attempt-0")
    old.flush()
    new = make(topic, txid)  # the next attempt of the same task: fences the old one, aborts its transaction
    new.init_transactions(30)
    with pytest.raises(TransactionFailed) as fenced:
        old.commit(10)
    assert fenced.value.fenced, fenced.value
    old.close()
    new.begin()
    new.send(enc.slice(0, 300), "attempt-1")
    new.send_ledger(ledger_topic, [(b"unit", b'{"delivered": 1}')])
    new.flush()
    touched = new.partitions_touched
    new.commit(30)
    new.begin()
    new.send(enc.slice(300, enc.rows), "attempt-1")
    new.flush()
    new.abort(10)
    new.close()
    records = consume_all(kafka.bootstrap_servers, topic)
    assert len(records) == 300 and {r.headers["run_id"] for r in records} == {b"attempt-1"}
    assert Counter(r.raw_value for r in records) == Counter(enc.slice(0, 300).values.to_pylist())
    assert [(r.key, r.raw_value) for r in consume_all(kafka.bootstrap_servers, ledger_topic)] == [
        (b"unit", b'{"delivered": 1}')
    ]
    if front != "python":  # it counts the partitions its transaction wrote: each got one commit marker
        assert touched == len({r.partition for r in records})
    else:  # delivery reports for failures only: it cannot tell
        assert touched is None


@pytest.mark.parametrize("front", ["c", "python", "kafka-python"])
def test_a_transactional_call_waits_for_kafka_no_longer_than_the_delivery_timeout(front):
    with socket.socket() as s:  # a port nothing listens on: Kafka down
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    make = _front_end(front, dead, **{"request.timeout.ms": "1000", "delivery.timeout.ms": "2000"})
    task = TaskDelivery(EXACTLY_ONCE, "r", "r", "t", None, {}, {}, kafka_timeout_s=2.0)
    if front == "kafka-python":  # it bootstraps in its constructor, within the same bound
        with pytest.raises(DeliveryFailed, match=r"Kafka client could not start: .*Unable to bootstrap"):
            make("t", "test-down")
        return
    made = []

    def new(txid):
        made.append(make("t", txid))
        return made[-1]

    with pytest.raises(TransactionFailed, match=r"did not answer within delivery\.timeout\.ms \(2 s\)"):
        open_transactional(new, "test-down", task, TaskStats(0, 0, 0, 0, "h"))
    assert made and all(p.handle is None if hasattr(p, "handle") else p.producer is None for p in made)  # closed


@pytest.mark.parametrize("front", ["c", "python", "kafka-python"])
def test_a_refusal_counts_every_record_the_producer_was_given(kafka, front):
    """Ledger entries and dead letters fail as data records do, so "N of M records" counts
    them too: a refused entry among 500 records and a dead letter is 1 of 502, not 1 of 500."""
    data, small = f"refusal-{front}", f"refusal-{front}-small"
    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic(data, 1, 1)
        admin.ensure_topic(small, 1, 1, {"max.message.bytes": "2000"})
    # Not idempotent: kafka-python's idempotent producer takes a refused record as fatal and
    # gives up every batch in flight with it.
    producer = _front_end(front, kafka.bootstrap_servers, **{"enable.idempotence": "false"})(data)
    try:
        producer.send(_encoded(), "run-1")
        producer.send_dead_letters(data, [(b'{"line": "a"}', [("reason", b"too short")])])
        producer.flush()  # in by the time the entry is refused, as a unit's records are (Writer._committed)
        producer.send_ledger(small, [(b"entry", b"x" * 5000)])  # the broker refuses it: over the topic's limit
        with pytest.raises(DeliveryFailed, match=r"\b1 of 502 records not acknowledged"):
            producer.flush()
    finally:
        producer.close()
    assert len(consume_all(kafka.bootstrap_servers, data)) == 501
