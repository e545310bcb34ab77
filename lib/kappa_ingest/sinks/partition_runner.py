"""The per-partition runner shared by the Python producers (confluent, kafka-python).

Each Spark partition gets its producers inside the partition function, never on the
driver or per record (Spark's "design patterns for foreachRDD"). The runner parses and
converts each Arrow batch (:func:`kappa_ingest.source.records.encode_batch`; the first
ones while the writer still waits on Kafka for their unit: :mod:`.early`), hands it to the
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

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
from pyspark.rdd import RDD
from pyspark.serializers import NoOpSerializer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from kappa_ingest.delivery.guarantees import TaskDelivery
from kappa_ingest.sinks import dead_letter, task_notes
from kappa_ingest.sinks.early import Early, converted_early
from kappa_ingest.sinks.producer import DeliveryFailed
from kappa_ingest.sinks.task_stats import STATS_SCHEMA, TaskStats, TaskStatsParam
from kappa_ingest.sinks.task_units import TaskInput, mixes
from kappa_ingest.sinks.writers import MakeProducer, Writer, writer_for
from kappa_ingest.source import split_reader
from kappa_ingest.source.dataframe import Source
from kappa_ingest.source.parsing import BatchParser, Parsed
from kappa_ingest.source.records import Encoded, encode_batch, wall_clock_ms
from kappa_ingest.source.splits import Unit
from kappa_ingest.source.task_input import cyclic_gc_off, lines_of

RERUNS = 2  # times a task sends its units again after a transaction its coordinator aborted


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
    batches: Iterator[tuple[pa.RecordBatch, Early | None]],
    task_input: TaskInput,
    convert: Callable[[Unit, pa.RecordBatch, Early | None], tuple],
) -> Iterator[Encoded]:
    """Each unit's rows converted (``convert``, given the batch's early conversion where
    one was made: :mod:`.early`); in an ordered run (rows sorted by event time, several
    splits interleaved) a batch's pieces are put back in the batch's order."""
    for batch, early in batches:
        pieces, where = [], []
        for unit, rows, at in task_input.units_at(batch):
            parsed, enc = convert(unit, rows, early)
            if not task_input.ordered:
                yield enc
                continue
            pieces.append(enc)
            where.append(at[parsed.row_at])
        if pieces:
            yield Encoded.merge(pieces, where)


def parse_at(parse: BatchParser, rows: pa.RecordBatch, unit: Unit, task_input: TaskInput, held: int = 0) -> Parsed:
    """``parse(rows)``, the rows of ``unit`` after ``held`` lines of it not yet counted; a
    record too large for Kafka under ``--strict-size`` is named by its line (or record) in
    its file."""
    from kappa_ingest.source.record_size import RecordTooLarge

    try:
        return parse(rows)
    except RecordTooLarge as e:
        raise e.located(unit.start, task_input.position(unit) + held, parse.counts_lines) from None


def sent_with_reruns(
    send: Callable[[Writer, TaskStats], None],
    new_writer: Callable[[TaskStats], Writer],
    stats: TaskStats,
    replayable: bool,
) -> TaskStats:
    """``send`` the task's units through a new writer; the statistics of the send that
    succeeded. librdkafka's rule for an abortable error is to abort, then start over: a
    task that can read its splits again (``replayable``) whose failed transaction its
    coordinator aborted sends its units again, up to RERUNS times (the units it committed
    are in the ledger by then). Any other failure is the task's."""
    reruns = 0
    while True:
        writer = new_writer(stats)
        try:
            send(writer, stats)
            return stats
        except DeliveryFailed as e:
            if not replayable or not writer.rolled_back or reruns == RERUNS:
                raise
            task_notes.note(f"a transaction was aborted ({e}); the task sent its units again")
        reruns += 1
        stats = stats.again()


# Set so (conf/spark-defaults.conf), the Python tasks of DataFrames and of RDDs have one worker
# daemon: its key is the workers' environment, which either setting otherwise sets apart.
SHARED_DAEMON = {"spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
                 "spark.sql.execution.pyspark.udf.hideTraceback.enabled": "false"}  # fmt: skip


def rdd_shares_workers(spark: SparkSession) -> bool:
    """Whether an RDD's Python tasks run in the DataFrame tasks' workers (one daemon)."""
    return all(str(spark.conf.get(k)).lower() == v for k, v in SHARED_DAEMON.items())


ROW_CAP = "spark.sql.execution.arrow.maxRecordsPerBatch"
CALL_SITE = "callSite.short"  # a job's stages are named so where it is set (SparkContext.getCallSite)


def row_capped(spark: SparkSession) -> bool:
    """Whether the rows handed to Python come in batches of at most ``ROW_CAP`` rows (0 or
    less: no row cap, Spark's byte cap alone)."""
    return int(spark.conf.get(ROW_CAP) or 0) > 0


@contextmanager
def sql_settings_in_tasks(spark: SparkSession, map_stages: str) -> Iterator[None]:
    """The session's settings handed to the tasks of the jobs run inside, as Spark hands
    them to a query's (``SQLExecution.withSQLConfPropagated``: every ``spark*`` setting a
    local property of the thread's jobs, which tasks read their SQL settings from). An
    RDD over a DataFrame's plan runs outside a query: its tasks, the plan's Python
    functions among them, would otherwise read the defaults (another worker daemon,
    Arrow's byte cap). ``map_stages``: what the shuffles' map stages are called (adaptive
    execution submits them from a thread of its own, which names them
    ``$anonfun$withThreadLocalCaptured$2 at CompletableFuture.java``; an RDD action's
    stage PySpark names itself). The thread's own properties are put back after."""
    sc = spark.sparkContext
    jsc = sc._jsc.sc()
    before = jsc.getLocalProperties()
    handed = sc._jvm.org.apache.spark.util.Utils.cloneProperties(before)
    handed.putAll({**{k: v for k, v in spark.conf.getAll.items() if k.startswith("spark")}, CALL_SITE: map_stages})
    jsc.setLocalProperties(handed)
    try:
        yield
    finally:
        jsc.setLocalProperties(before)


def arrow_batches(df: DataFrame) -> RDD:
    """``df``'s partitions as Arrow batches of ``maxRecordsPerBatch`` rows, for an RDD's
    Python tasks. Spark writes each row straight into the batch's vectors
    (``Dataset.toArrowBatchRdd``), where ``mapInArrow`` first wraps every row in a
    struct of one field, a Scala array made and checked per row (a quarter of the
    executor JVM's CPU while an ordered replay sent, perf). No byte cap: for rows of a
    bounded width only (``Source.narrow``), and a row cap (``ROW_CAP`` 0 or less: a
    whole partition in one batch)."""
    large = str(df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    schema = to_arrow_schema(df.schema, prefers_large_types=large)
    batches = RDD(df._jdf.toArrowBatchRdd().toJavaRDD(), df.sparkSession.sparkContext, NoOpSerializer())
    return batches.mapPartitions(lambda blobs: (pa.ipc.read_record_batch(pa.py_buffer(b), schema) for b in blobs))


def run_partitions(
    source: Source,
    make_producer: MakeProducer,
    delivery: TaskDelivery,
    rate_per_task: float | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> SendOutcome:
    """Send every partition of the source through its own writer; one TaskStats per task."""
    df, spec, parser = source.df, source.spec, source.parser
    spark = df.sparkSession
    acc = spark.sparkContext.accumulator({}, TaskStatsParam())

    def send(batches: Iterator[pa.RecordBatch], writer: Writer, stats: TaskStats, splits: list[Unit] | None) -> None:
        parse = parser.fresh()
        pacing = Pacer(*delivery.pace) if delivery.pace else Throttle(rate_per_task)
        task_input = TaskInput(stats.partition, delivery.parts, delivery.skip, writer.admit, delivery.ordered)
        writer.task_input = task_input

        def conversion(unit: Unit, rows: pa.RecordBatch, held: int = 0) -> tuple[Parsed, Encoded]:
            parsed = parse_at(parse, rows, unit, task_input, held)
            return parsed, encode_batch(parsed.rows, spec.with_columns(parsed.columns), clock())

        def convert(unit: Unit, rows: pa.RecordBatch, early: Early | None) -> tuple[Parsed, Encoded]:
            parsed, enc = early.taken() if early is not None else conversion(unit, rows)
            if delivery.dead_letter_topic and parsed.rejects.num_rows:
                writer.send_dead_letters(dead_letter.records(rows, parsed, unit, task_input.position(unit),
                                                             spec.run_id, parser.counts_lines))  # fmt: skip
            stats.add(parsed, enc)
            if early is not None:
                stats.rows_early += enc.rows
            task_input.add(unit, rows.num_rows, parsed, enc)
            return parsed, enc

        if splits is not None:  # its units known from its splits: opened ahead
            writer.upcoming(splits)
        try:
            writer.start()
            lines = lines_of(batches, parse, stats)
            early = converted_early(lines, task_input, writer.waiting, writer.waits_for, conversion)
            for enc in converted(early, task_input, convert):
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

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stats = TaskStats.current()
        with cyclic_gc_off():
            handed = splits = None
            if parser.reads_splits and not mixes(delivery.parts, delivery.ordered):  # split after split
                handed = list(batches)
                splits = [Unit(*split) for split in split_reader.handed_splits(handed)]
            stats = sent_with_reruns(
                lambda writer, stats: send(iter(handed) if handed is not None else batches, writer, stats, splits),
                lambda stats: writer_for(delivery, make_producer, stats),
                stats,
                replayable=handed is not None,
            )
        acc.add({stats.task_id: stats})
        yield pa.RecordBatch.from_pylist([asdict(stats)])

    def sent_by(tasks: RDD) -> list[TaskStats]:
        return [TaskStats(**row) for b in tasks.mapPartitions(run).collect() for row in b.to_pylist()]

    try:
        if source.handed and rdd_shares_workers(spark):
            # Each task handed its splits by an RDD of them: no query to plan (the DataFrame's
            # plan and its splits' broadcast took ~0.75 s from the set-up's end to the first task).
            stats = sent_by(spark.sparkContext.parallelize(source.handed, len(source.handed)))
        elif source.places is not None and row_capped(spark) and rdd_shares_workers(spark):  # moved by Python
            with sql_settings_in_tasks(spark, map_stages="lines marked and moved"):
                stats = sent_by(source.places(int(spark.conf.get(ROW_CAP))))
        elif source.narrow and row_capped(spark) and rdd_shares_workers(spark):  # moved lines
            with sql_settings_in_tasks(spark, map_stages="lines marked and moved"):
                stats = sent_by(arrow_batches(df))  # arrow_batches runs the shuffle's map stage (adaptive execution)
        else:
            stats = [TaskStats(**row.asDict()) for row in df.mapInArrow(run, STATS_SCHEMA).collect()]
    except Exception as e:  # noqa: BLE001 - the caller maps it; what succeeded is in the accumulator
        return SendOutcome(list(acc.value.values()), e)
    return SendOutcome(stats)
