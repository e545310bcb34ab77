"""The ``spark`` sink: Spark's built-in Kafka writer (``spark-sql-kafka-0-10``).

Spark's writer reports no output metrics, so the conversion step counts what it hands to
the writer in an accumulator keyed by task id. Spark merges a task's accumulator updates
only when the task succeeds, and the writer flushes and checks every send before a task
succeeds, so a counted row is an acknowledged row. The sink is at-least-once: a retried
task sends its partition again (the report names such duplicates).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pyspark import AccumulatorParam, TaskContext
from pyspark.sql import DataFrame

from kappa_ingest.parsing import BatchParser, Parsed
from kappa_ingest.records import Encoded, RecordSpec, to_records, wall_clock_ms
from kappa_ingest.sinks.partition_runner import TaskStats, Throttle


class TaskStatsParam(AccumulatorParam):
    """Merges per-task statistics: ``{task_id: TaskStats}``."""

    def zero(self, value: dict[int, TaskStats]) -> dict[int, TaskStats]:
        return {}

    def addInPlace(self, a: dict[int, TaskStats], b: dict[int, TaskStats]) -> dict[int, TaskStats]:  # noqa: N802
        for tid, s in b.items():
            if tid not in a:
                a[tid] = s
                continue
            t = a[tid]
            t.rows_read += s.rows_read
            t.rows_sent += s.rows_sent
            t.rows_quarantined += s.rows_quarantined
            t.lines_skipped += s.lines_skipped
            t.bytes_sent += s.bytes_sent
            t.started_ms = min(t.started_ms, s.started_ms)
            t.ended_ms = max(t.ended_ms, s.ended_ms)
        return a


def send(
    df: DataFrame,
    spec: RecordSpec,
    parser: BatchParser,
    topic: str,
    options: dict[str, str],
    rate_per_task: float | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> list[TaskStats]:
    """Write every row through Spark's Kafka sink; one TaskStats per successful task."""
    acc = df.sparkSession.sparkContext.accumulator({}, TaskStatsParam())
    throttles: dict[int, Throttle] = {}

    def on_batch(parsed: Parsed, enc: Encoded) -> Iterator[tuple[int, int]]:
        ctx = TaskContext.get()
        assert ctx is not None
        tid = ctx.taskAttemptId()
        stats = TaskStats.current()
        stats.add(parsed, enc)
        acc.add({tid: stats})
        return throttles.setdefault(tid, Throttle(rate_per_task)).slices(enc.rows)

    records = to_records(df, spec, clock=clock, parser=parser, on_batch=on_batch)
    records.write.format("kafka").options(**options).option("topic", topic).save()
    return list(acc.value.values())
