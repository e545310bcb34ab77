"""The delivery ledger: which units of input are durably in which topic.

Where it lives, and why there: in a compacted Kafka topic (``_kappa_ingest_ledger`` by
default, one partition), written by each task through the producer that sends the
task's records. In exactly-once mode a task's ledger records are part of its transaction
(as Kafka Connect's exactly-once source tasks keep their source offsets, KIP-618): the
records of a unit and its ledger entry become visible together or not at all, so there
is no moment at which a unit is committed in the topic but not in the ledger, or the
other way round. A Delta table beside the metrics (``<metrics-dir>/delta/ledger``) would
need a second commit after Kafka's, which a killed task or driver can separate; it is
kept as the ledger's readable copy instead (appended by each run, and by a resumed run
with what it found in the topic), for notebooks and ``kappa-ingest report``.

In at-least-once mode a task writes its ledger records after Kafka acknowledged its
records: a unit may be in the topic and not yet in the ledger (then it is sent again,
the at-least-once duplicate), never the other way round.

A record's key names the unit in its topic, ``[topic, file, start, length, part, parts]``
as JSON, so compaction keeps the latest delivery of each; its value is the entry below.
The topic's lock records (``lock.py``) have JSON objects as keys and are not entries.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kappa_ingest.splits import Unit
from kappa_ingest.topics import LOG, high_watermarks

DEFAULT_TOPIC = "_kappa_ingest_ledger"
TOPIC_CONFIG = {"cleanup.policy": "compact"}
READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Entry:
    """One unit delivered to ``topic`` by a run (``lineage``: the run it resumes, or itself)."""

    topic: str
    unit: Unit
    file_size: int
    file_mtime_ms: int
    run_id: str
    lineage: str
    mode: str
    lines: int = 0  # lines Spark read in the unit (rows, headers and blank lines)
    rows_read: int = 0
    rows_sent: int = 0
    rows_quarantined: int = 0
    bytes_sent: int = 0
    task_id: int = -1  # -1: recorded by the driver (a unit no row of which begins in this part)
    attempt: int = 0
    delivered_at_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    status: str = "delivered"
    split_bytes: int = 0  # the run's split size (0: not recorded), so a later run splits the file alike

    def key(self) -> bytes:
        u = self.unit
        return json.dumps([self.topic, u.file, u.start, u.length, u.part, u.parts], separators=(",", ":")).encode()

    def value(self) -> bytes:
        d = asdict(self)
        del d["topic"], d["unit"]
        return json.dumps(d, separators=(",", ":")).encode()

    def record(self) -> tuple[bytes, bytes]:
        return self.key(), self.value()

    @classmethod
    def from_record(cls, key: bytes, value: bytes) -> Entry:
        topic, file, start, length, part, parts = json.loads(key)
        return cls(topic=topic, unit=Unit(file, start, length, part, parts), **json.loads(value))

    def row(self) -> dict[str, Any]:
        """The entry as a row of the Delta ``ledger`` table."""
        d = asdict(self)
        u = d.pop("unit")
        return {**d, "file": u["file"], "split_start": u["start"], "split_length": u["length"], "part": u["part"],
                "parts": u["parts"]}  # fmt: skip

    def matches(self, size: int, mtime_ms: int) -> bool:
        """Whether the entry is of the file as it is now (same size and modification time)."""
        return self.file_size == size and self.file_mtime_ms == mtime_ms


def latest(entries: list[Entry]) -> dict[tuple[str, Unit], Entry]:
    """The last entry of each (topic, unit), as compaction keeps it."""
    out: dict[tuple[str, Unit], Entry] = {}
    for e in entries:
        out[(e.topic, e.unit)] = e
    return out


def read(
    conf: dict[str, Any], ledger_topic: str, timeout_s: float = READ_TIMEOUT_S, start: dict[int, int] | None = None
) -> list[Entry]:
    """Every committed entry, oldest first, as a ``read_committed`` consumer sees them
    (from offsets ``start`` per partition, if given).

    ``conf`` is librdkafka configuration (bootstrap servers, security). It reads up to the
    high watermark taken at the start, so whatever was committed before the call is seen;
    a transaction still open on the ledger holds the read back until it ends (bounded by
    ``timeout_s``, then KafkaUnavailable)."""
    return [
        Entry.from_record(key, value)
        for _, key, value in read_records(conf, ledger_topic, timeout_s, start)
        if value is not None and not key.startswith(b"{")
    ]


def read_records(
    conf: dict[str, Any],
    ledger_topic: str,
    timeout_s: float = READ_TIMEOUT_S,
    start: dict[int, int] | None = None,
    isolation: str = "read_committed",
) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of the ledger as ``(offset, key, value)``, oldest first: the committed
    ones, or with ``read_uncommitted`` all (the lock's records, written outside transactions,
    are read so: a transaction left open on the ledger cannot hold them back)."""
    from confluent_kafka import Consumer, KafkaException

    from kappa_ingest.errors import KafkaUnavailable

    consumer = Consumer({**conf, "group.id": "kappa-ingest-ledger", "enable.auto.commit": False, "logger": LOG,
                         "isolation.level": isolation, "enable.partition.eof": True})  # fmt: skip
    try:
        return _read(consumer, conf, ledger_topic, timeout_s, start)
    except KafkaException as e:
        raise KafkaUnavailable(f"reading the delivery ledger {ledger_topic!r}: {e.args[0].str()}") from e
    finally:
        consumer.close()


def _read(
    consumer: Any, conf: dict[str, Any], ledger_topic: str, timeout_s: float, start: dict[int, int] | None
) -> list[tuple[int, bytes, bytes | None]]:
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    from kappa_ingest.errors import KafkaUnavailable

    md = consumer.list_topics(ledger_topic, timeout=timeout_s).topics.get(ledger_topic)
    if md is None or md.error is not None:
        return []  # no ledger yet: nothing delivered
    parts = sorted(md.partitions)
    ends = high_watermarks(conf, ledger_topic, len(parts), timeout_s)
    first = {p: (start or {}).get(p, OFFSET_BEGINNING) for p in parts}
    todo = {p for p in parts if ends[p] > max(0, first[p])}
    consumer.assign([TopicPartition(ledger_topic, p, first[p]) for p in todo])
    out: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + timeout_s
    while todo:
        if time.monotonic() > deadline:
            raise KafkaUnavailable(
                f"the delivery ledger {ledger_topic!r} could not be read to its end in {timeout_s:.0f} s"
                " (a transaction left open on it by another run?)"
            )
        for m in consumer.consume(1000, timeout=0.05):  # consume() waits out its timeout unless the batch fills
            err = m.error()
            if err is None:
                out.append((m.offset(), m.key(), m.value()))
                if m.offset() + 1 >= ends[m.partition()]:
                    todo.discard(m.partition())
            elif err.code() == KafkaError._PARTITION_EOF:
                if m.offset() >= ends[m.partition()]:
                    todo.discard(m.partition())
            else:
                raise KafkaUnavailable(f"reading the delivery ledger {ledger_topic!r}: {err.str()}")
    return out


def end_offsets(conf: dict[str, Any], ledger_topic: str, timeout_s: float = READ_TIMEOUT_S) -> dict[int, int]:
    """The ledger's high watermark per partition (where a run's entries will start)."""
    from confluent_kafka import Consumer

    c = Consumer({**conf, "group.id": "kappa-ingest-ledger", "logger": LOG})
    try:
        md = c.list_topics(ledger_topic, timeout=timeout_s).topics.get(ledger_topic)
        parts = len(md.partitions) if md is not None and md.error is None else 0
    finally:
        c.close()
    return high_watermarks(conf, ledger_topic, parts, timeout_s)


def write(conf: dict[str, Any], ledger_topic: str, entries: list[Entry], timeout_s: float = READ_TIMEOUT_S) -> None:
    """Write entries from the driver (idempotent producer, acknowledged by all in-sync
    replicas): the Spark sink's units once their tasks succeeded, and units no row of
    which begins in a part, once the whole job succeeded. KafkaUnavailable if not acknowledged."""
    from confluent_kafka import KafkaException, Producer

    from kappa_ingest.errors import KafkaUnavailable

    if not entries:
        return
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err.str())

    producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "logger": LOG})
    try:
        for e in entries:
            key, value = e.record()
            producer.produce(ledger_topic, value, key, on_delivery=on_delivery)
        remaining = producer.flush(timeout_s)
    finally:
        try:
            producer.purge()
            producer.poll(0)
        except KafkaException:
            pass
    if remaining or failed:
        raise KafkaUnavailable(
            f"the delivery ledger {ledger_topic!r} did not acknowledge {remaining + len(failed)} of {len(entries)} entries"
            f" ({failed[0] if failed else 'timed out'})"
        )


def topic_config(brokers: int) -> tuple[int, dict[str, str]]:
    """Replication and settings of a new ledger topic: replicated like Kafka's own internal
    topics (three copies where there are three brokers, two of them in sync to write)."""
    replicas = min(3, brokers)
    return replicas, {**TOPIC_CONFIG, "min.insync.replicas": str(2 if replicas >= 3 else 1)}
