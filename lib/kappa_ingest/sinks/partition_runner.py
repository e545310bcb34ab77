"""The per-partition runner shared by the Python producers (confluent, kafka-python).

Each Spark partition gets one producer, created inside the partition function, never on
the driver or per record (Spark's "design patterns for foreachRDD"). The runner converts
each Arrow batch with :func:`kappa_ingest.records.encode_batch`, hands it to the
producer, throttles if asked, and ends the task with one statistics row.

A task's life, by delivery mode (:mod:`kappa_ingest.delivery`):

- exactly-once: init the transactional producer (fencing every earlier attempt of this
  task), begin; on a retried attempt read the ledger and drop the units an earlier
  attempt committed; send; flush; add the ledger entries; commit. The task ends only
  after the commit returned.
- at-least-once: send; flush; add the ledger entries; flush.

Whatever fails, the producer is closed in ``finally``: an open transaction is aborted
first, and records still queued are dropped, never left to a reused Python worker to
deliver later beside the retried attempt's. Rows count as sent from the producers'
delivery reports, collected in an action; the tasks that succeeded before a job failed
are known from an accumulator (Spark merges it for successful tasks only).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from pyspark import AccumulatorParam, TaskContext
from pyspark.sql import DataFrame

from kappa_ingest import dead_letter, task_notes
from kappa_ingest.delivery import ABORT_TIMEOUT_S, TaskDelivery
from kappa_ingest.ledger import Entry
from kappa_ingest.parsing import BatchParser, Parsed
from kappa_ingest.records import Encoded, RecordSpec, encode_batch, wall_clock_ms
from kappa_ingest.sinks.task_input import TaskInput
from kappa_ingest.splits import Unit


class DeliveryFailed(RuntimeError):
    """Raised in a task whose producer could not deliver every record."""


class TransactionFailed(DeliveryFailed):
    """A transactional call failed; ``fenced`` when a newer attempt took the transactional.id over."""

    def __init__(
        self, what: str, reason: str, *, fatal: bool = False, abortable: bool = False, fenced: bool = False
    ) -> None:
        self.what, self.reason, self.fatal, self.abortable, self.fenced = what, reason, fatal, abortable, fenced
        message = f"Kafka transaction failed while {what}: {reason}"
        if fenced:
            message += "; a newer attempt of this task (or a run resuming it) took its transactional.id over"
        super().__init__(message)


class PartitionProducer(Protocol):
    def send(self, enc: Encoded, run_id: str) -> None:
        """Send every record of ``enc``, with the headers ``run_id`` and ``source_file``."""

    def send_ledger(self, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        """Send ledger records (key, value) to ``topic``."""

    def send_dead_letters(self, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
        """Send dead letters (value, headers) to ``topic``."""

    def flush(self) -> None:
        """Wait for every record; raise DeliveryFailed unless every one was acknowledged."""

    def init_transactions(self, timeout_s: float) -> None: ...
    def begin(self) -> None: ...
    def commit(self, timeout_s: float) -> None: ...
    def abort(self, timeout_s: float) -> None: ...

    @property
    def partitions_touched(self) -> int | None:
        """Data-topic partitions written by the current transaction (each gets a commit marker); None: unknown."""

    def close(self) -> None:
        """Release the producer, dropping what it still holds; never raises."""


class Discard:
    """The dry run's producer: converts everything, sends nothing."""

    partitions_touched = 0

    def send(self, enc: Encoded, run_id: str) -> None:
        pass

    def send_ledger(self, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        pass

    def send_dead_letters(self, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
        pass

    def flush(self) -> None:
        pass

    def init_transactions(self, timeout_s: float) -> None:
        pass

    def begin(self) -> None:
        pass

    def commit(self, timeout_s: float) -> None:
        pass

    def abort(self, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class TaskStats:
    """What one task did, joined later with Spark's own task timings by ``task_id``."""

    task_id: int
    stage_id: int
    partition: int
    attempt: int
    host: str
    rows_read: int = 0
    rows_sent: int = 0
    rows_quarantined: int = 0
    lines_skipped: int = 0  # headers and blank lines: read by Spark, not rows
    lines_dropped: int = 0  # lines of units delivered before (resumed run, earlier attempt)
    bytes_sent: int = 0
    started_ms: int = 0
    ended_ms: int = 0
    transactions: int = 0  # committed by this task
    markers: int = 0  # commit markers its transaction put in the topic's partitions; -1: unknown
    transaction_ms: int = 0  # spent initialising (fencing) and committing its transaction
    units: str = "[]"  # JSON: the ledger entries of the units it delivered
    inherited: str = "[]"  # JSON: entries of units an earlier attempt of it committed
    failed: str = "{}"  # JSON: rows failing each row-level expectation (--quality-gate quarantine)
    record_loops: str = ""  # C | Python: the record loops its process ran
    notes: str = "[]"  # JSON: warnings raised in its process (task_notes)

    @classmethod
    def current(cls) -> TaskStats:
        ctx = TaskContext.get()
        assert ctx is not None, "TaskStats.current() runs inside a Spark task"
        return cls(
            task_id=ctx.taskAttemptId(),
            stage_id=ctx.stageId(),
            partition=ctx.partitionId(),
            attempt=ctx.attemptNumber(),
            host=socket.gethostname(),
            started_ms=wall_clock_ms(),
        )

    def add(self, parsed: Parsed, enc: Encoded) -> None:
        self.rows_read += parsed.rows_read
        self.rows_sent += enc.rows
        self.rows_quarantined += parsed.rejects.num_rows
        self.lines_skipped += parsed.skipped
        self.bytes_sent += enc.nbytes
        self.ended_ms = wall_clock_ms()
        if parsed.failed:
            counts = json.loads(self.failed)
            for label, n in parsed.failed.items():
                counts[label] = counts.get(label, 0) + n
            self.failed = json.dumps(counts)

    def entries(self) -> list[Entry]:
        return [_entry(d) for d in json.loads(self.units)]

    def inherited_entries(self) -> list[Entry]:
        return [_entry(d) for d in json.loads(self.inherited)]

    def finish(self, task_input: TaskInput, entries: list[Entry]) -> None:
        self.lines_dropped = task_input.lines_dropped
        self.units = json.dumps([asdict(e) for e in entries])
        self.inherited = json.dumps([asdict(e) for e in task_input.inherited.values()])
        self.record_loops, self.notes = task_notes.record_loops(), json.dumps(task_notes.taken())
        self.ended_ms = wall_clock_ms()


def _entry(d: dict[str, Any]) -> Entry:
    return Entry(**{**d, "unit": Unit(**d["unit"])})


_TEXT_FIELDS = {"host", "units", "inherited", "failed", "record_loops", "notes"}
STATS_SCHEMA = ", ".join(f"{f.name} {'string' if f.name in _TEXT_FIELDS else 'bigint'}" for f in fields(TaskStats))


class TaskStatsParam(AccumulatorParam):
    """Per-task statistics by task attempt id: ``{task_id: TaskStats}`` (set once per task)."""

    def zero(self, value: dict[int, TaskStats]) -> dict[int, TaskStats]:
        return {}

    def addInPlace(self, a: dict[int, TaskStats], b: dict[int, TaskStats]) -> dict[int, TaskStats]:  # noqa: N802
        a.update(b)
        return a


@dataclass
class SendOutcome:
    """The sending job's result: the statistics of the tasks that succeeded (all of them
    unless ``error``), and the job's error if it failed."""

    stats: list[TaskStats]
    error: Exception | None = None


class Throttle:
    """Holds a task to ``rate`` rows per second, measured from its first row, in slices of
    a twentieth of a second's rows so the rate is smooth even at one-second resolution."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.start: float | None = None
        self.done = 0

    def slices(self, enc: Encoded) -> Iterator[tuple[int, int]]:
        """``(start, stop)`` ranges covering the records, each released on schedule."""
        n = enc.rows
        if not self.rate:
            yield 0, n
            return
        if self.start is None:
            self.start = time.monotonic()
        step = max(1, int(self.rate / 20))
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            delay = self.start + self.done / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.done += hi - lo
            yield lo, hi


class Pacer:
    """``--replay-speed``: each record is released when its event time, ``speed`` times faster
    than it happened, comes round after ``anchor_ms`` (a wall-clock time every task shares);
    in slices of a twentieth of a second, as the throttle's. Rows come sorted by event time."""

    def __init__(self, first_event_ms: int, speed: float, anchor_ms: int) -> None:
        self.first, self.speed, self.anchor = first_event_ms, speed, anchor_ms

    def slices(self, enc: Encoded) -> Iterator[tuple[int, int]]:
        due = self.anchor + (np.asarray(enc.timestamps_ms, dtype=np.float64) - self.first) / self.speed
        lo, n = 0, enc.rows
        while lo < n:
            now = time.time() * 1000
            if due[lo] > now:
                time.sleep((due[lo] - now) / 1000)
                now = due[lo]
            hi = max(lo + 1, int(np.searchsorted(due, now + 50, side="right")))
            yield lo, hi
            lo = hi


def converted(
    batches: Iterator[pa.RecordBatch], task_input: TaskInput, convert: Callable[[Unit, pa.RecordBatch], tuple]
) -> Iterator[Encoded]:
    """Each unit's rows converted (``convert``); in an ordered run (rows sorted by event
    time, several splits interleaved) a batch's pieces are put back in the batch's order."""
    for batch in batches:
        pieces, where = [], []
        for unit, rows, at in task_input.units_at(batch):
            parsed, enc = convert(unit, rows)
            if not task_input.ordered:
                yield enc
                continue
            pieces.append(enc)
            where.append(at[parsed.row_at])
        if pieces:
            yield Encoded.merge(pieces, where)


def headers_by_file(enc: Encoded, run_id: str) -> tuple[list[list[tuple[str, bytes]]], list[int]]:
    """The records' headers, made once per distinct source file in the batch."""
    encoded = enc.source_files.dictionary_encode()
    rid = run_id.encode()
    headers = [[("run_id", rid), ("source_file", f.encode())] for f in encoded.dictionary.to_pylist()]
    return headers, encoded.indices.to_pylist()


def delivered_earlier(delivery: TaskDelivery) -> dict[Unit, Entry]:
    """Units this run's earlier attempts committed, read from the ledger (after this attempt
    fenced them), from where the ledger stood when the run began.

    Asked by a retried attempt, and by every task reading shuffled rows: there a lost
    executor's shuffle output makes Spark re-run the stage, whose attempts count from 0
    again (PySpark's TaskContext does not tell the stage attempt)."""
    ctx = TaskContext.get()
    retried = ctx is not None and ctx.attemptNumber() > 0
    if delivery.ledger_topic is None or not (retried or delivery.parts > 1):
        return {}
    from kappa_ingest import ledger

    entries = ledger.read(delivery.ledger_conf, delivery.ledger_topic, start=delivery.ledger_start)
    return {e.unit: e for e in entries if e.topic == delivery.topic and e.run_id == delivery.run_id}


def parse_at(parse: BatchParser, rows: pa.RecordBatch, unit: Unit, task_input: TaskInput) -> Parsed:
    """``parse(rows)``, the rows of ``unit``; a record too large for Kafka under
    ``--strict-size`` is named by its line (or record) in its file."""
    from kappa_ingest.record_size import RecordTooLarge

    try:
        return parse(rows)
    except RecordTooLarge as e:
        raise e.located(unit.start, task_input.position(unit), parse.counts_lines) from None


def ledger_entries(task_input: TaskInput, delivery: TaskDelivery, stats: TaskStats) -> list[Entry]:
    out = []
    for unit, t in task_input.tallies.items():
        size, mtime = delivery.files.get(unit.file, (-1, -1))
        out.append(
            Entry(delivery.topic, unit, size, mtime, delivery.run_id, delivery.lineage, delivery.mode, t.lines,
                  t.rows_read, t.rows_sent, t.rows_quarantined, t.bytes_sent, stats.task_id, stats.attempt,
                  split_bytes=delivery.split_bytes)
        )  # fmt: skip
    return out


def run_partitions(
    df: DataFrame,
    spec: RecordSpec,
    parser: BatchParser,
    make_producer: Callable[[str | None], PartitionProducer],
    delivery: TaskDelivery,
    rate_per_task: float | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> SendOutcome:
    """Send every partition of ``df`` through its own producer; one TaskStats per task."""
    acc = df.sparkSession.sparkContext.accumulator({}, TaskStatsParam())

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stats = TaskStats.current()
        parse = parser.fresh()
        pacing = Pacer(*delivery.pace) if delivery.pace else Throttle(rate_per_task)
        began = time.monotonic()
        producer: PartitionProducer | None = None
        in_transaction = False
        try:
            producer = make_producer(delivery.transactional_id(stats.partition))
            if delivery.transactional:
                t0 = time.monotonic()
                within_delivery_timeout(lambda: producer.init_transactions(delivery.kafka_timeout_s), delivery)
                producer.begin()
                in_transaction = True
                stats.transaction_ms += round((time.monotonic() - t0) * 1000)
            task_input = TaskInput(stats.partition, delivery.parts, delivery.skip, delivered_earlier(delivery),
                                   delivery.ordered)  # fmt: skip

            def convert(unit: Unit, rows: pa.RecordBatch) -> tuple[Parsed, Encoded]:
                parsed = parse_at(parse, rows, unit, task_input)
                enc = encode_batch(parsed.rows, spec.with_columns(parsed.columns), clock())
                if delivery.dead_letter_topic and parsed.rejects.num_rows:
                    letters = dead_letter.records(rows, parsed, unit, task_input.position(unit), spec.run_id,
                                                  parser.counts_lines)  # fmt: skip
                    producer.send_dead_letters(delivery.dead_letter_topic, letters)
                stats.add(parsed, enc)
                task_input.add(unit, rows.num_rows, parsed, enc)
                return parsed, enc

            for enc in converted(batches, task_input, convert):
                for lo, hi in pacing.slices(enc):
                    producer.send(enc.slice(lo, hi), spec.run_id)
            producer.flush()
            entries = ledger_entries(task_input, delivery, stats)
            if delivery.ledger_topic is not None and entries:
                producer.send_ledger(delivery.ledger_topic, [e.record() for e in entries])
            if delivery.transactional:
                touched = producer.partitions_touched
                t0 = time.monotonic()
                _commit(producer, began, delivery)
                stats.transaction_ms += round((time.monotonic() - t0) * 1000)
                in_transaction = False
                stats.transactions, stats.markers = 1, -1 if touched is None else touched
            elif entries:
                producer.flush()
            stats.finish(task_input, entries)
        except BaseException:
            if in_transaction and producer is not None:
                try:
                    producer.abort(ABORT_TIMEOUT_S)
                except Exception:  # noqa: BLE001 - the task's own error is the one to report
                    pass  # a fenced or unreachable transaction is aborted by the next attempt or the driver
            raise
        finally:
            if producer is not None:
                producer.close()
        acc.add({stats.task_id: stats})
        yield pa.RecordBatch.from_pylist([asdict(stats)])

    try:
        rows = df.mapInArrow(run, STATS_SCHEMA).collect()
    except Exception as e:  # noqa: BLE001 - the caller maps it; what succeeded is in the accumulator
        return SendOutcome(list(acc.value.values()), e)
    return SendOutcome([TaskStats(**row.asDict()) for row in rows])


def within_delivery_timeout(call: Callable[[], None], delivery: TaskDelivery) -> None:
    """Run a transactional call; one that waited out the delivery timeout says so."""
    t0 = time.monotonic()
    try:
        call()
    except TransactionFailed as e:
        if time.monotonic() - t0 < 0.9 * delivery.kafka_timeout_s:
            raise
        raise TransactionFailed(
            e.what,
            f"{e.reason}; Kafka did not answer within delivery.timeout.ms ({delivery.kafka_timeout_s:.0f} s):"
            " check that the brokers run",
            fatal=e.fatal,
            abortable=e.abortable,
            fenced=e.fenced,
        ) from e


def _commit(producer: PartitionProducer, began: float, delivery: TaskDelivery) -> None:
    timeout_s = delivery.transaction_timeout_s
    try:
        within_delivery_timeout(lambda: producer.commit(delivery.kafka_timeout_s), delivery)
    except TransactionFailed as e:
        ran = time.monotonic() - began
        if ran < 0.9 * timeout_s:
            raise
        raise TransactionFailed(
            e.what,
            f"{e.reason}; the task ran {ran:.0f} s, past transaction.timeout.ms ({timeout_s:.0f} s), so the broker"
            " aborted its transaction: use more --partitions or set --kafka-opt transaction.timeout.ms higher",
            fatal=e.fatal,
        ) from e
