"""The per-partition runner shared by the Python producers (confluent, kafka-python).

Each Spark partition gets its producers inside the partition function, never on the
driver or per record (Spark's "design patterns for foreachRDD"). The runner parses and
converts each Arrow batch (:func:`kappa_ingest.records.encode_batch`), hands it to the
task's writer (:mod:`.writers`: transactions per unit or per task, or acknowledged
sends), throttles or paces if asked, and ends the task with one statistics row.

Whatever fails, the writer aborts an open transaction (unless its producer can take no
more calls) and closes its producers in ``finally``: records still queued are dropped,
never left to a reused Python worker to deliver later beside the retried attempt's.
Rows count as sent from the producers' delivery reports, collected in an action; the
tasks that succeeded before a job failed are known from an accumulator (Spark merges it
for successful tasks only).
"""

from __future__ import annotations

import gc
import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import AccumulatorParam, TaskContext
from pyspark.sql import DataFrame

from kappa_ingest import dead_letter, task_notes
from kappa_ingest.delivery import TaskDelivery
from kappa_ingest.ledger import Entry
from kappa_ingest.parsing import BatchParser, Parsed
from kappa_ingest.records import Encoded, RecordSpec, encode_batch, wall_clock_ms
from kappa_ingest.sinks.task_input import TaskInput, lines_of
from kappa_ingest.sinks.writers import MakeProducer, writer_for
from kappa_ingest.splits import Unit


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
    lines_read: int = -1  # lines the task read itself (kappa_ingest.split_reader); -1: Spark read them
    bytes_sent: int = 0
    started_ms: int = 0
    ended_ms: int = 0
    transactions: int = 0  # committed by this task
    aborted: int = 0  # transactions it aborted
    commit_retries: int = 0  # commit calls repeated after a retriable error
    markers: int = 0  # commit markers its transactions put in the topic's partitions; -1: unknown
    transaction_ms: int = 0  # spent initialising (fencing) and committing its transactions
    units: str = "[]"  # JSON: the ledger entries of the units it delivered
    inherited: str = "[]"  # JSON: entries of its units found delivered (by an earlier attempt, or another run)
    taken: str = "[]"  # JSON: units another writer took over and has not committed yet
    offsets: str = "[]"  # JSON: [unit, [[partition, first offset, count], ...]] of units it committed, where known
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

    def taken_units(self) -> list[Unit]:
        return [Unit(**d) for d in json.loads(self.taken)]

    def offset_runs(self) -> dict[Unit, list[tuple[int, int, int]]]:
        return {Unit(**u): [tuple(r) for r in runs] for u, runs in json.loads(self.offsets)}

    def finish(self, task_input: TaskInput, entries: list[Entry]) -> None:
        self.lines_dropped = task_input.lines_dropped
        self.units = json.dumps([asdict(e) for e in entries])
        self.inherited = json.dumps([asdict(e) for e in task_input.inherited.values()])
        self.record_loops, self.notes = task_notes.record_loops(), json.dumps(task_notes.taken())
        self.ended_ms = wall_clock_ms()


def _entry(d: dict[str, Any]) -> Entry:
    return Entry(**{**d, "unit": Unit(**d["unit"])})


_TEXT_FIELDS = {"host", "units", "inherited", "taken", "offsets", "failed", "record_loops", "notes"}
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


def parse_at(parse: BatchParser, rows: pa.RecordBatch, unit: Unit, task_input: TaskInput) -> Parsed:
    """``parse(rows)``, the rows of ``unit``; a record too large for Kafka under
    ``--strict-size`` is named by its line (or record) in its file."""
    from kappa_ingest.record_size import RecordTooLarge

    try:
        return parse(rows)
    except RecordTooLarge as e:
        raise e.located(unit.start, task_input.position(unit), parse.counts_lines) from None


def run_partitions(
    df: DataFrame,
    spec: RecordSpec,
    parser: BatchParser,
    make_producer: MakeProducer,
    delivery: TaskDelivery,
    rate_per_task: float | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> SendOutcome:
    """Send every partition of ``df`` through its own writer; one TaskStats per task."""
    acc = df.sparkSession.sparkContext.accumulator({}, TaskStatsParam())

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stats = TaskStats.current()
        parse = parser.fresh()
        pacing = Pacer(*delivery.pace) if delivery.pace else Throttle(rate_per_task)
        writer = writer_for(delivery, make_producer, stats)
        task_input = TaskInput(stats.partition, delivery.parts, delivery.skip, writer.admit, delivery.ordered)
        writer.task_input = task_input

        def convert(unit: Unit, rows: pa.RecordBatch) -> tuple[Parsed, Encoded]:
            parsed = parse_at(parse, rows, unit, task_input)
            enc = encode_batch(parsed.rows, spec.with_columns(parsed.columns), clock())
            if delivery.dead_letter_topic and parsed.rejects.num_rows:
                writer.send_dead_letters(dead_letter.records(rows, parsed, unit, task_input.position(unit),
                                                             spec.run_id, parser.counts_lines))  # fmt: skip
            stats.add(parsed, enc)
            task_input.add(unit, rows.num_rows, parsed, enc)
            return parsed, enc

        # A batch makes a few hundred Python objects and no cycles: the cyclic collector,
        # run every 700 of them, cost ~4% of the CPU while sending (perf). Off during the task.
        collecting = gc.isenabled()
        gc.disable()
        try:
            writer.start()
            for enc in converted(lines_of(batches, parse, stats), task_input, convert):
                for lo, hi in pacing.slices(enc):
                    writer.send(enc.slice(lo, hi))
            writer.finish()
            stats.finish(task_input, writer.entries)
            stats.offsets = json.dumps(writer.offsets)
        except BaseException:
            writer.abandon()
            raise
        finally:
            writer.close()
            if collecting:
                gc.enable()
        acc.add({stats.task_id: stats})
        yield pa.RecordBatch.from_pylist([asdict(stats)])

    try:
        rows = df.mapInArrow(run, STATS_SCHEMA).collect()
    except Exception as e:  # noqa: BLE001 - the caller maps it; what succeeded is in the accumulator
        return SendOutcome(list(acc.value.values()), e)
    return SendOutcome([TaskStats(**row.asDict()) for row in rows])
