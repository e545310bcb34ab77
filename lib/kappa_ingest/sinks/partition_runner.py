"""The per-partition runner shared by the Python producers (confluent, kafka-python).

Each Spark partition gets one producer, created inside the partition function, never on
the driver or per record (Spark's "design patterns for foreachRDD"). The runner converts
each Arrow batch with :func:`kappa_ingest.records.encode_batch`, hands it to the
producer, throttles if asked, and ends the task with one statistics row. Rows are counted
as sent from the producers' delivery reports and collected in an action, so a failed and
retried task never counts twice; a partition with any failed delivery fails its task.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Protocol

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame

from kappa_ingest.parsing import BatchParser, Parsed
from kappa_ingest.records import Encoded, RecordSpec, encode_batch, wall_clock_ms


class DeliveryFailed(RuntimeError):
    """Raised in a task whose producer could not deliver every record."""


class PartitionProducer(Protocol):
    def send(self, enc: Encoded, run_id: str) -> None:
        """Send every record of ``enc``, with the headers ``run_id`` and ``source_file``."""

    def close(self) -> None:
        """Flush; raise DeliveryFailed unless every record was acknowledged."""


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
    bytes_sent: int = 0
    started_ms: int = 0
    ended_ms: int = 0

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


STATS_SCHEMA = ", ".join(f"{f.name} {'string' if f.name == 'host' else 'bigint'}" for f in fields(TaskStats))


class Throttle:
    """Holds a task to ``rate`` rows per second, measured from its first row, in slices of
    a twentieth of a second's rows so the rate is smooth even at one-second resolution."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.start: float | None = None
        self.done = 0

    def slices(self, n: int) -> Iterator[tuple[int, int]]:
        """``(start, stop)`` ranges covering ``n`` rows, each released on schedule."""
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


def headers_by_file(enc: Encoded, run_id: str) -> tuple[list[list[tuple[str, bytes]]], list[int]]:
    """The records' headers, made once per distinct source file in the batch."""
    encoded = enc.source_files.dictionary_encode()
    rid = run_id.encode()
    headers = [[("run_id", rid), ("source_file", f.encode())] for f in encoded.dictionary.to_pylist()]
    return headers, encoded.indices.to_pylist()


def run_partitions(
    df: DataFrame,
    spec: RecordSpec,
    parser: BatchParser,
    make_producer: Callable[[], PartitionProducer],
    rate_per_task: float | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> list[TaskStats]:
    """Send every partition of ``df`` through its own producer; one TaskStats per task."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stats = TaskStats.current()
        parse = parser.fresh()
        producer = make_producer()
        throttle = Throttle(rate_per_task)
        for batch in batches:
            parsed = parse(batch)
            enc = encode_batch(parsed.rows, spec, clock())
            for lo, hi in throttle.slices(enc.rows):
                producer.send(enc.slice(lo, hi), spec.run_id)
            stats.add(parsed, enc)
        producer.close()
        stats.ended_ms = wall_clock_ms()
        yield pa.RecordBatch.from_pylist([stats.__dict__])

    rows = df.mapInArrow(run, STATS_SCHEMA).collect()
    return [TaskStats(**row.asDict()) for row in rows]
