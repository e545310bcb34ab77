"""Rows of a bounded width handed to the Python workers without Spark sizing each batch
row by row.

Spark 4 caps a batch of rows for a Python worker at ``maxBytesPerBatch`` (256 MiB) as well
as at ``maxRecordsPerBatch``, and keeps to the byte cap by sizing the whole batch after
every row it adds (``ArrowWriter.sizeInBytes``: each column's value count set and its
buffers summed). Rows of a bounded width (a task's splits; lines moved by their offsets
or places with their marks) are bounded by the row cap alone,
and that sizing was a third of the executor JVM's CPU while an ordered replay sent
(perf). Rows that carry text of any length (a line, a record Spark's CSV reader parsed)
keep the byte cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from kappa_ingest.sinks.partition_runner import row_capped

MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
UNSIZED = str(2**31 - 1)  # Int.MaxValue: Spark skips the sizing altogether


@contextmanager
def unsized_batches(spark: SparkSession, narrow: bool) -> Iterator[None]:
    """The jobs run inside hand rows to Python by the row cap alone, where ``narrow``
    (their rows are of a bounded width) and there is a row cap (0 or less: none, and the
    byte cap stays); the session's setting is restored after."""
    if not narrow or not row_capped(spark):
        yield
        return
    before = spark.conf.get(MAX_BYTES, None)
    spark.conf.set(MAX_BYTES, UNSIZED)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(MAX_BYTES)
        else:
            spark.conf.set(MAX_BYTES, before)
