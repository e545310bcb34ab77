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
The ledger holds these kinds of record, each with its kind in a ``kind`` header:
``entry`` (a unit delivered), ``claim`` (the topic's lock, ``lock.py``: key
``{"lock": TOPIC, "run": RUN}``), ``superseded`` (key ``{"superseded": RUN}``, written
by a run that took RUN over: its tasks stop at it), and a watch's ``watch`` and ``passed``
(``kappa_ingest.watch.delivered``: when it first started, the files it passed over). Records written before the header are
told apart by their key's JSON (an array, or an object and its first field); a kind this
version does not know is skipped, and a record that says it is an entry but is not one
fails the read, naming its offset, rather than being misread.

The ledger must be one partition (one order of claims and entries that every reader
agrees on), compacted (entries never expire) and timestamped by the broker
(``LogAppendTime``: the lock's leases are judged on one clock, the broker's).
:func:`ensure` creates it so and refuses an existing one that is not.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from kappa_ingest.errors import KafkaUnavailable, UsageError
from kappa_ingest.kafka.topics import LOG, Admin, Watermarks, high_watermarks
from kappa_ingest.source.splits import Unit

TOPIC_CONFIG = {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}
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
    parts_by: str = ""  # with parts > 1, what put a row in its part (splits.BY_LINES, BY_KEYS, BY_ROWS, BY_KEY_VALUES; "": not recorded)
    file_version: str = ""  # an object's ETag (a local file: none)

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
        del d["parts_by"]  # (the table's columns stay those it was made with)
        return {**d, "file": u["file"], "split_start": u["start"], "split_length": u["length"], "part": u["part"],
                "parts": u["parts"]}  # fmt: skip

    def matches(self, size: int, mtime_ms: int, version: str = "") -> bool:
        """Whether the entry is of the file as it is now (same size and modification time,
        and for an object the same ETag)."""
        return self.file_size == size and self.file_mtime_ms == mtime_ms and self.file_version == version


def latest(entries: list[Entry]) -> dict[tuple[str, Unit], Entry]:
    """The last entry of each (topic, unit), as compaction keeps it."""
    out: dict[tuple[str, Unit], Entry] = {}
    for e in entries:
        out[(e.topic, e.unit)] = e
    return out


ENTRY, CLAIM, SUPERSEDED = "entry", "claim", "superseded"  # the kinds of ledger record
# A watch's: when it first started on a landing (key {"watch": TOPIC, "landing": WHERE}),
# and each file it found there then and passed over (key {"passed": TOPIC, "file": PATH}).
WATCH, PASSED = "watch", "passed"
KIND_HEADER = "kind"


def kind_headers(kind: str) -> list[tuple[str, bytes]]:
    """The headers every ledger record of ``kind`` carries."""
    return [(KIND_HEADER, kind.encode())]


class Record(NamedTuple):
    offset: int
    key: bytes
    value: bytes | None
    timestamp_ms: int  # the broker's (LogAppendTime)
    kind: str = ""  # ENTRY, CLAIM, SUPERSEDED, or another writer's kind (skipped)


def kind_of(key: bytes | None, headers: list[tuple[str, bytes]] | None) -> str:
    """A ledger record's kind: its ``kind`` header, else (records from before the header)
    what its key is: an entry's is a JSON array, a claim's an object with ``lock``, a
    superseding record's one with ``superseded``."""
    for name, value in headers or ():
        if name == KIND_HEADER:
            return (value or b"").decode(errors="replace")
    try:
        key_json = json.loads(key or b"")
    except ValueError:
        return "unknown"
    if isinstance(key_json, list):
        return ENTRY
    if isinstance(key_json, dict) and "lock" in key_json:
        return CLAIM
    if isinstance(key_json, dict) and "superseded" in key_json:
        return SUPERSEDED
    return "unknown"


def read(
    conf: dict[str, Any], ledger_topic: str, timeout_s: float = READ_TIMEOUT_S, start: dict[int, int] | None = None
) -> list[Entry]:
    """Every committed entry, oldest first, as a ``read_committed`` consumer sees them
    (from offsets ``start`` per partition, if given).

    ``conf`` is librdkafka configuration (bootstrap servers, security). It reads up to the
    high watermark taken at the start, so whatever was committed before the call is seen;
    a transaction still open on the ledger holds the read back until it ends (bounded by
    ``timeout_s``, then KafkaUnavailable)."""
    return snapshot(conf, ledger_topic, timeout_s, start)[0]


def snapshot(
    conf: dict[str, Any], ledger_topic: str, timeout_s: float = READ_TIMEOUT_S, start: dict[int, int] | None = None
) -> tuple[list[Entry], dict[int, int]]:
    """:func:`read`, and the offsets it read up to: a run's tasks read the ledger on from
    there (:class:`Tail`), so nothing committed after the run chose its units is missed."""
    records, ends = _records(conf, ledger_topic, timeout_s, start, "read_committed")
    return [e for r in records if (e := entry_of(r)) is not None], ends


def key_object(r: Record) -> dict[str, Any]:
    """A claim's or a superseding record's key as the object it must be; {} if it is not one
    (a writer this version does not know: the record is skipped, not misread)."""
    try:
        key = json.loads(r.key or b"")
    except ValueError:
        return {}
    return key if isinstance(key, dict) else {}


def entry_of(r: Record) -> Entry | None:
    """The entry a ledger record holds; None for other kinds, and for a deleted entry."""
    if r.kind != ENTRY or r.value is None:
        return None
    try:
        return Entry.from_record(r.key, r.value)
    except (ValueError, TypeError) as e:
        raise KafkaUnavailable(
            f"the delivery ledger's record at offset {r.offset} says it is an entry but is not one ({e}): a writer"
            " this version of kappa-ingest does not know wrote to the ledger"
        ) from e


def read_on(
    conf: dict[str, Any],
    ledger_topic: str,
    start: dict[int, int] | None,
    take: Callable[[Record], None],
    timeout_s: float = READ_TIMEOUT_S,
    isolation: str = "read_committed",
) -> dict[int, int]:
    """Hand ``take`` each committed record (``read_uncommitted``: each record) from offsets
    ``start`` (None: the first) to the end as it was when asked, one at a time (a ledger of
    millions is never a list); return that end: a reader that keeps it reads on from there."""
    return _read_on(conf, ledger_topic, timeout_s, start, isolation, take)


def read_records(
    conf: dict[str, Any],
    ledger_topic: str,
    timeout_s: float = READ_TIMEOUT_S,
    start: dict[int, int] | None = None,
    isolation: str = "read_committed",
) -> list[Record]:
    """Every record of the ledger, oldest first: the committed ones, or with
    ``read_uncommitted`` all (the lock's records, written outside transactions, are read
    so: a transaction left open on the ledger cannot hold them back)."""
    return _records(conf, ledger_topic, timeout_s, start, isolation)[0]


def _consumer(conf: dict[str, Any], isolation: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            **conf,
            "group.id": "kappa-ingest-ledger",
            "enable.auto.commit": False,
            "logger": LOG,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            # The end is known by an empty fetch (a read_committed reader never sees the last
            # offset: a commit marker), which the broker holds up to this long (default 500 ms).
            # A reader kept between readings (Reader) is assigned for each reading only.
            "fetch.wait.max.ms": 10,
        }
    )  # fmt: skip (a start no longer kept: from the first that is)


def _records(
    conf: dict[str, Any], ledger_topic: str, timeout_s: float, start: dict[int, int] | None, isolation: str
) -> tuple[list[Record], dict[int, int]]:
    out: list[Record] = []
    ends = _read_on(conf, ledger_topic, timeout_s, start, isolation, out.append)
    return out, ends


def _read_on(
    conf: dict[str, Any],
    ledger_topic: str,
    timeout_s: float,
    start: dict[int, int] | None,
    isolation: str,
    take: Callable[[Record], None],
) -> dict[int, int]:
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

    consumer = _consumer(conf, isolation)
    try:
        md = consumer.list_topics(ledger_topic, timeout=timeout_s).topics.get(ledger_topic)
        if md is not None and md.error is not None and md.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            # Not "no ledger": a ledger that cannot be read now would read as nothing delivered.
            raise KafkaUnavailable(f"reading the delivery ledger {ledger_topic!r} from Kafka: {md.error.str()}")
        if md is None or md.error is not None:  # no ledger yet: nothing delivered; whatever is, from its start
            return {0: 0}  # (the ledger has one partition: ensure() refuses any other)
        parts = sorted(md.partitions)
        ends = high_watermarks(conf, ledger_topic, len(parts), timeout_s)
        first = {p: (start or {}).get(p, OFFSET_BEGINNING) for p in parts}
        todo = {p for p in parts if ends[p] > max(0, first[p])}
        consumer.assign([TopicPartition(ledger_topic, p, first[p]) for p in todo])
        _consume(consumer, ledger_topic, ends, todo, time.monotonic() + timeout_s, take)
        return ends
    except KafkaException as e:
        raise KafkaUnavailable(f"reading the delivery ledger {ledger_topic!r} from Kafka: {e.args[0].str()}") from e
    finally:
        consumer.close()


def _consume(
    consumer: Any, ledger_topic: str, ends: dict[int, int], todo: set[int], deadline: float,
    take: Callable[[Record], None],
) -> None:  # fmt: skip
    """Consume the assigned partitions in ``todo`` up to ``ends`` (a read_committed consumer
    stops at the last stable offset until an open transaction below ``ends`` is over)."""
    from confluent_kafka import KafkaError

    while todo:
        if time.monotonic() > deadline:
            raise KafkaUnavailable(
                f"Kafka did not let the delivery ledger {ledger_topic!r} be read to its end in time (its brokers"
                " unreachable, or a transaction left open on it by another run)"
            )
        for m in consumer.consume(1000, timeout=0.05):  # consume() waits out its timeout unless the batch fills
            err = m.error()
            if err is None:
                take(Record(m.offset(), m.key(), m.value(), m.timestamp()[1], kind_of(m.key(), m.headers())))
                if m.offset() + 1 >= ends[m.partition()]:
                    todo.discard(m.partition())
            elif err.code() == KafkaError._PARTITION_EOF:
                if m.offset() >= ends[m.partition()]:
                    todo.discard(m.partition())
            else:
                raise KafkaUnavailable(f"reading the delivery ledger {ledger_topic!r} from Kafka: {err.str()}")


class Reader:
    """The ledger read on from ``start``, reading after reading, through one kept consumer
    (assigned for each reading only: a consumer left assigned would fetch every 10 ms
    meanwhile; paused and resumed, it waited a second to fetch again) and one kept
    watermark query: a reading of what is new takes a round trip or two, not the handful
    of a new client's."""

    def __init__(self, conf: dict[str, Any], ledger_topic: str, start: dict[int, int]) -> None:
        if not start:  # it would read nothing, and a unit another writer committed would be sent again
            raise ValueError(f"reading the delivery ledger {ledger_topic!r} on from nowhere: no start offsets given")
        self.conf, self.ledger_topic = conf, ledger_topic
        self.position = dict(start)
        self._consumer: Any = None
        self._watermarks = Watermarks(conf)

    def warm(self) -> None:
        """Connect to the ledger while the caller waits for something else (a thread of its
        own): the next reading then waits one round trip, not four."""
        self._watermarks.warm(self.ledger_topic)

    def read(self, take: Callable[[Record], None], timeout_s: float = READ_TIMEOUT_S) -> None:
        """Hand ``take`` each record committed since the last reading, up to the end as it is now."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            ends = self._watermarks.query(self.ledger_topic, len(self.position), timeout_s)
            todo = {p for p, end in ends.items() if end > self.position.get(p, 0)}
            if not todo:
                return
            if self._consumer is None:
                self._consumer = _consumer(self.conf, "read_committed")
            self._consumer.assign([TopicPartition(self.ledger_topic, p, o) for p, o in self.position.items()])
            try:
                _consume(self._consumer, self.ledger_topic, ends, todo, time.monotonic() + timeout_s, take)
            finally:
                self._consumer.unassign()
            self.position.update(ends)
        except KafkaException as e:
            raise KafkaUnavailable(
                f"reading the delivery ledger {self.ledger_topic!r} from Kafka: {e.args[0].str()}"
            ) from e

    def close(self) -> None:
        self._watermarks.close()
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()


class Tail(Reader):
    """The ledger read on from a snapshot, inside a task: after a transactional id is
    initialised (every earlier holder's transaction has ended), :meth:`catch_up` reads what
    was committed up to then, so a unit another writer of the same id committed is seen.

    ``entries``: the latest entry of each unit of ``topic`` committed after the snapshot;
    ``superseded``: runs taken over by another (run -> the run that took over)."""

    def __init__(self, conf: dict[str, Any], ledger_topic: str, topic: str, start: dict[int, int]) -> None:
        super().__init__(conf, ledger_topic, start)
        self.topic = topic
        self.entries: dict[Unit, Entry] = {}
        self.superseded: dict[str, str] = {}

    def catch_up(self, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.read(self._take, timeout_s)

    def _take(self, r: Record) -> None:
        if r.kind == SUPERSEDED and r.value is not None:
            run = key_object(r).get("superseded")
            if run is not None:
                self.superseded[run] = json.loads(r.value)["by"]
            return
        e = entry_of(r)
        if e is not None and e.topic == self.topic:
            self.entries[e.unit] = e


def supersede(conf: dict[str, Any], ledger_topic: str, runs: list[str], by: str) -> None:
    """Record that ``by`` took over ``runs``: a task of theirs still alive somewhere stops at
    its next unit (it reads the ledger after initialising the unit's transactional id)."""
    write_records(conf, ledger_topic, [(json.dumps({"superseded": r}, separators=(",", ":")).encode(),
                                        json.dumps({"by": by}).encode()) for r in runs], kind=SUPERSEDED)  # fmt: skip


def write(conf: dict[str, Any], ledger_topic: str, entries: list[Entry], timeout_s: float = READ_TIMEOUT_S) -> None:
    """Write entries from the driver (idempotent producer, acknowledged by all in-sync
    replicas): the Spark sink's units once their tasks succeeded, and units no row of
    which begins in a part, once the whole job succeeded. KafkaUnavailable if not acknowledged."""
    write_records(conf, ledger_topic, [e.record() for e in entries], timeout_s)


def write_records(
    conf: dict[str, Any],
    ledger_topic: str,
    records: list[tuple[bytes, bytes]],
    timeout_s: float = READ_TIMEOUT_S,
    kind: str = ENTRY,
) -> None:
    from confluent_kafka import Producer

    if not records:
        return
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err.str())

    producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "logger": LOG})
    try:
        for key, value in records:
            producer.produce(ledger_topic, value, key, on_delivery=on_delivery, headers=kind_headers(kind))
        remaining = producer.flush(timeout_s)
    finally:
        discard_queued(producer)
    if remaining or failed:
        raise KafkaUnavailable(
            f"the delivery ledger {ledger_topic!r} did not acknowledge {remaining + len(failed)} of {len(records)}"
            f" records ({failed[0] if failed else 'timed out'})"
        )


def ensure(admin: Admin, ledger_topic: str, data_replication: int = 1) -> None:
    """Create the ledger topic as it must be, or check an existing one: UsageError (exit 2)
    naming what is wrong and the command that fixes it, before anything is sent. Its
    timestamp type is set where missing (a ledger made by an earlier version, if this user
    may alter it)."""
    brokers = admin.check_reachable()
    replicas = min(brokers, max(3, data_replication))
    shape = admin.describe(ledger_topic)
    if shape is None:
        config = {**TOPIC_CONFIG, "min.insync.replicas": str(2 if replicas >= 3 else 1)}
        if admin.ensure_topic(ledger_topic, 1, replicas, config, seen_absent=True):
            return
        # There after all: made meanwhile, or not yet known to the broker asked (brokers
        # learn of a new topic one by one). Checked as found.
        shape = admin.describe(ledger_topic, created=True)
        if shape is None:
            raise KafkaUnavailable(f"ledger topic {ledger_topic!r} exists but no broker describes it; run again")
    bs = admin.bootstrap_servers
    if shape.partitions != 1:
        raise UsageError(
            f"ledger topic {ledger_topic!r} has {shape.partitions} partitions; the delivery ledger needs exactly 1 (its"
            " lock and entries need one order every reader agrees on). Create a new one and give it to every run"
            f" with --ledger-topic: kafka-topics.sh --bootstrap-server {bs} --create --topic {ledger_topic}.v2"
            f" --partitions 1 --replication-factor {replicas} --config cleanup.policy=compact"
            f" --config message.timestamp.type=LogAppendTime (what {ledger_topic!r} recorded is not carried over)"
        )
    policy = admin.topic_setting(ledger_topic, "cleanup.policy")
    if policy is not None and policy != "compact":
        raise UsageError(
            f"ledger topic {ledger_topic!r} has cleanup.policy={policy}; the delivery ledger needs compact (deleted"
            " entries would let --incremental and --resume send delivered files again): kafka-configs.sh"
            f" --bootstrap-server {bs} --alter --entity-type topics --entity-name {ledger_topic}"
            " --add-config cleanup.policy=compact"
        )
    if brokers > 1 and shape.replication < min(brokers, data_replication):
        replicas_of = {"topic": ledger_topic, "partition": 0, "replicas": admin.broker_ids()[:data_replication]}
        plan = json.dumps({"version": 1, "partitions": [replicas_of]}, separators=(",", ":"))
        raise UsageError(
            f"ledger topic {ledger_topic!r} has {shape.replication} replica(s), fewer than the data topic's"
            f" {data_replication}: a broker lost would lose deliveries the topic keeps. Raise it: write"
            f" {plan} to ledger.json and run"
            f" kafka-reassign-partitions.sh --bootstrap-server {bs} --execute --reassignment-json-file ledger.json"
        )
    stamped = admin.topic_setting(ledger_topic, "message.timestamp.type")
    if (
        stamped is not None
        and stamped != "LogAppendTime"
        and not admin.set_topic_config(ledger_topic, "message.timestamp.type", "LogAppendTime")
    ):
        raise UsageError(
            f"ledger topic {ledger_topic!r} has message.timestamp.type={stamped}; the ledger's lock needs the"
            " broker's clock (LogAppendTime), and this user may not set it: kafka-configs.sh"
            f" --bootstrap-server {bs} --alter --entity-type topics --entity-name {ledger_topic}"
            " --add-config message.timestamp.type=LogAppendTime"
        )


def discard_queued(producer: Any) -> None:
    """Drop what a confluent producer still holds, so that closing it sends nothing later; a
    fenced or failed producer refuses even this, and is dropped all the same."""
    from confluent_kafka import KafkaException

    try:
        producer.purge()
        producer.poll(0)
    except KafkaException:
        pass
