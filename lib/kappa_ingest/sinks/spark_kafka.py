"""The ``spark`` sink: Spark's built-in Kafka writer (``spark-sql-kafka-0-10``).

Spark's writer reports no output metrics, so the conversion step counts what it hands to
the writer, per unit of input, and adds the task's count to an accumulator keyed by task
id once its rows are all handed over. Spark merges a task's accumulator updates only when
the task succeeds, and the writer flushes and checks every send before a task succeeds,
so a counted row is an acknowledged row. The sink is at-least-once: it writes no
transactions, and a retried task sends its partition again (the report counts such
duplicates); its units enter the ledger from the driver, once their tasks succeeded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame

from kappa_ingest.delivery.guarantees import TaskDelivery
from kappa_ingest.sinks import dead_letter
from kappa_ingest.sinks.partition_runner import (
    Pacer,
    SendOutcome,
    Throttle,
    converted,
    parse_at,
)
from kappa_ingest.sinks.task_stats import TaskStats, TaskStatsParam
from kappa_ingest.sinks.task_units import TaskInput
from kappa_ingest.sinks.writers import entry_for
from kappa_ingest.source.parsing import BatchParser, Parsed
from kappa_ingest.source.records import (
    KAFKA_RECORD_SCHEMA,
    TIMESTAMP_HEADER,
    Encoded,
    RecordSpec,
    encode_batch,
    kafka_batch,
    wall_clock_ms,
)
from kappa_ingest.source.splits import Unit
from kappa_ingest.source.task_input import lines_of


def send(
    df: DataFrame,
    spec: RecordSpec,
    parser: BatchParser,
    options: dict[str, str],
    delivery: TaskDelivery,
    rate_per_task: float | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> SendOutcome:
    """Write every row through Spark's Kafka sink; one TaskStats per successful task."""
    acc = df.sparkSession.sparkContext.accumulator({}, TaskStatsParam())

    def convert(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = TaskContext.get()
        assert ctx is not None
        stats = TaskStats.current()
        parse = parser.fresh()
        pacing = Pacer(*delivery.pace) if delivery.pace else Throttle(rate_per_task)
        task_input = TaskInput(ctx.partitionId(), delivery.parts, delivery.skip, ordered=delivery.ordered)
        letters: list = []

        def convert(unit: Unit, rows: pa.RecordBatch, _early: None) -> tuple[Parsed, Encoded]:
            parsed = parse_at(parse, rows, unit, task_input)
            enc = encode_batch(parsed.rows, spec.with_columns(parsed.columns), clock())
            if dead_letters and parsed.rejects.num_rows:
                letters.extend(dead_letter.records(
                    rows, parsed, unit, task_input.position(unit), spec.run_id, parse.counts_lines))  # fmt: skip
            stats.add(parsed, enc)
            task_input.add(unit, rows.num_rows, parsed, enc)
            return parsed, enc

        # Nothing waits on Kafka here to admit a unit (Spark's sink writes what it is given).
        for enc in converted(((b, None) for b in lines_of(batches, parse, stats)), task_input, convert):
            for lo, hi in pacing.slices(enc):
                batch = kafka_batch(enc.slice(lo, hi), spec.run_id)
                yield _to(batch, delivery.topic) if dead_letters else batch
            if letters:
                yield _to(_dead_letter_batch(letters, clock()), delivery.dead_letter_topic)
                letters.clear()
        stats.finish(task_input, [entry_for(task_input, delivery, stats, u) for u in task_input.tallies])
        acc.add({stats.task_id: stats})

    dead_letters = delivery.dead_letter_topic is not None
    # With dead letters, each row names its topic (Spark's sink takes a topic column).
    records = df.mapInArrow(convert, KAFKA_RECORD_SCHEMA + (", topic string" if dead_letters else ""))
    writer = records.write.format("kafka").options(**options)
    try:
        (writer if dead_letters else writer.option("topic", delivery.topic)).save()
    except Exception as e:  # noqa: BLE001 - the caller maps it; what succeeded is in the accumulator
        return SendOutcome(list(acc.value.values()), e)
    return SendOutcome(list(acc.value.values()))


def _to(batch: pa.RecordBatch, topic: str | None) -> pa.RecordBatch:
    return batch.append_column("topic", pa.repeat(pa.scalar(topic, pa.string()), batch.num_rows))


def _dead_letter_batch(letters: list[tuple[bytes, list[tuple[str, bytes]]]], now_ms: int) -> pa.RecordBatch:
    """Dead letters in the sink's schema; their timestamp (now) travels as the others' do."""
    stamp = now_ms.to_bytes(8, "big")
    headers = [[{"key": k, "value": v} for k, v in h] + [{"key": TIMESTAMP_HEADER, "value": stamp}] for _, h in letters]
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.nulls(len(letters), pa.binary()),
            "value": pa.array([v for v, _ in letters], pa.binary()),
            "timestamp": pa.array([now_ms * 1000] * len(letters), pa.timestamp("us", tz="UTC")),
            "headers": pa.array(headers, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        }
    )
