"""Python workers made ready while the driver sets up Kafka, so the sending stage starts at speed.

A Spark task running Python first needs a worker: the daemon forks one, which imports
pyspark, pyarrow, polars, the Kafka client and this package, and its first Arrow CSV parse
and polars encode pay one-time initialisation. Measured on 2 cores: 2.9 s from task launch
to the first row, of a 13 s ingest of 1M rows. Workers are reused across tasks
(``spark.python.worker.reuse``), so one small job, one task per executor core, run in a
thread while the driver creates the topic and reads its offsets, pays that off the ingest
clock (and, for the confluent sink, builds its C loop if the cache lacks it). It starts as
soon as the run has its session, as an RDD job (no query plan to wait for), so the input's
planning (a cold session's first plans, ~1 s) runs beside it too: a run's set-up took 1.1-1.35 s
less than with a DataFrame job in each of four rounds, with no more CPU a row in the sending
stage (1.01x in the Python workers; bench-results/20261127T212237Z). It sends nothing and
touches no input; if it fails, the run goes on cold.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

from kappa_ingest.sinks.partition_runner import rdd_shares_workers

JOB_GROUP = "kappa-ingest-warmup"


def start(spark: SparkSession, sink: str, needed: bool = True) -> threading.Thread:
    """Warm one Python worker per concurrent task slot, in a daemon thread; join it before
    sending. Not ``needed`` (a watch's batch: its workers were warmed at its start and kept
    so): a thread that does nothing."""
    thread = threading.Thread(target=_warm if needed else _nothing, args=(spark, sink), name="kappa-warmup",
                              daemon=True)  # fmt: skip
    thread.start()
    return thread


def _nothing(spark: SparkSession, sink: str) -> None:
    pass


def _warm(spark: SparkSession, sink: str) -> set[int]:
    """The worker daemons of the workers it started (none if it failed)."""
    sc = spark.sparkContext
    try:
        slots = max(1, sc.defaultParallelism)
        sc.setJobGroup(JOB_GROUP, "kappa-ingest: start Python workers")
        if rdd_shares_workers(spark):
            # An RDD's job: no query to plan (a cold session's first plans take ~1 s), and
            # its workers are the DataFrame tasks'.
            return set(sc.parallelize(range(slots), slots).mapPartitions(_worker(sink)).collect())
        # The DataFrame tasks' daemon is their own: only a DataFrame job warms it.
        rows = spark.range(0, slots, numPartitions=slots)
        return {r.daemon for r in rows.mapInArrow(_batches(_worker(sink)), "daemon long").collect()}
    except Exception:  # noqa: BLE001 - a cold start is slower, not wrong
        return set()


def _batches(warm):  # type: ignore[no-untyped-def]
    def warm_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for daemon in warm(b.num_rows for b in batches):
            yield pa.RecordBatch.from_arrays([pa.array([daemon], pa.int64())], names=["daemon"])

    return warm_batches


def _static_archives() -> None:
    """Stop each task start from re-reading the worker's zip and jar archives.

    PySpark's worker calls ``importlib.invalidate_caches()`` at every task start, and on
    Python 3.11 a zipimporter answers by re-reading its archive's directory in pure Python:
    pyspark.zip, py4j's zip and spark-core's jar (on the workers' PYTHONPATH) took 0.14 s
    on an idle core and most of a second on a busy one (py-spy), per task. The archives do
    not change under a running worker, so their importers keep what they read.
    """
    import sys
    import zipimport

    class StaticArchive(zipimport.zipimporter):
        def invalidate_caches(self) -> None:
            pass

    for path, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            sys.path_importer_cache[path] = StaticArchive(path)


def _worker(sink: str):  # type: ignore[no-untyped-def]
    def warm(slots: Iterator[int]) -> Iterator[int]:
        _static_archives()
        from kappa_ingest.source.columns import BLOCK_COL, FILE_COL, LINE_COL
        from kappa_ingest.source.parsing import LineParser
        from kappa_ingest.source.records import RecordSpec, encode_batch

        if sink == "confluent":
            from kappa_ingest import native

            try:
                native.load()  # built here, off the clock, if the cache lacks it
            except native.NativeUnavailable:
                pass
        elif sink == "kafka-python":
            import kafka  # noqa: F401
        spec = RecordSpec(("id", "name", "amount"), "warm-up")
        line = b'7,"a ""quoted"" name",1.5'
        lines = pa.RecordBatch.from_arrays(
            [pa.array([line] * 4, pa.binary()), pa.array(["warm-up"] * 4), pa.array([1] * 4, pa.int64())],
            names=[LINE_COL, FILE_COL, BLOCK_COL],
        )
        parsed = LineParser(spec.columns)(lines)
        encode_batch(parsed.rows, spec, 0)
        for _ in slots:
            pass
        yield os.getppid()  # the daemon the worker was forked from

    return warm
