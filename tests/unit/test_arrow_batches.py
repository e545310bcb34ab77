"""Rows handed from the JVM to the Python workers: narrow rows in batches of the row cap
alone, Spark's byte cap (and its sizing after every row) lifted for the jobs inside and the
session's setting given back after; Arrow's vectors written without index checks; a shuffled
frame's narrow rows handed to an RDD's tasks as the batches Spark writes them in."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from kappa_ingest.sinks.partition_runner import ROW_CAP as MAX_ROWS
from kappa_ingest.sinks.partition_runner import arrow_batches, sql_settings_in_tasks
from kappa_ingest.spark.arrow_batches import MAX_BYTES, unsized_batches

LARGE = "spark.sql.execution.arrow.useLargeVarTypes"


def _batch_rows(spark) -> list[int]:
    def sizes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield pa.RecordBatch.from_pydict({"n": [b.num_rows]})

    return sorted(r.n for r in spark.range(0, 6000, 1, 1).mapInArrow(sizes, "n long").collect())


def test_narrow_rows_are_batched_by_the_row_cap_alone_and_the_setting_given_back(spark):
    before = {k: spark.conf.get(k, None) for k in (MAX_ROWS, MAX_BYTES)}
    spark.conf.set(MAX_ROWS, "2500")
    spark.conf.set(MAX_BYTES, "4096")  # 512 longs a batch where the byte cap holds
    try:
        with unsized_batches(spark, narrow=True):
            assert _batch_rows(spark) == [1000, 2500, 2500]  # the executors read it as the job ran
        assert spark.conf.get(MAX_BYTES) == "4096"
        with unsized_batches(spark, narrow=False):
            assert max(_batch_rows(spark)) < 1000
        spark.conf.set(MAX_ROWS, "0")  # no row cap: the byte cap stays
        with unsized_batches(spark, narrow=True):
            assert max(_batch_rows(spark)) < 1000
        spark.conf.unset(MAX_BYTES)
        with unsized_batches(spark, narrow=True):
            pass
        assert spark.conf.get(MAX_BYTES, None) is None  # unset before, unset after
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def test_the_jvm_writes_arrow_vectors_without_index_checks(spark):
    jvm = spark.sparkContext._jvm
    assert jvm.System.getProperty("arrow.enable_unsafe_memory_access") == "true"
    assert not jvm.org.apache.arrow.memory.BoundsChecking.BOUNDS_CHECKING_ENABLED


def _stage_names(spark, group: str) -> set[str]:
    """The names of a job group's stages, once Spark's listener bus has recorded them all."""
    tracker = spark.sparkContext.statusTracker()
    for _ in range(100):
        jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(group)]
        stages = [tracker.getStageInfo(s) for j in jobs if j is not None for s in j.stageIds]
        if jobs and all(j is not None and j.status == "SUCCEEDED" for j in jobs) and all(stages):
            return {s.name for s in stages}
        time.sleep(0.05)
    raise AssertionError(f"the jobs of {group} were not recorded")


@pytest.mark.parametrize("large", [False, True], ids=["binary", "large binary"])
def test_a_sorted_frame_comes_to_an_rdds_tasks_as_its_arrow_batches_each_part_in_order(spark, large):
    def with_batch_sizes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:  # each row with the size of the batch its Python function was handed
            yield b.append_column("batch", pa.array([b.num_rows] * b.num_rows, pa.int64()))

    before = {k: spark.conf.get(k, None) for k in (MAX_ROWS, LARGE)}
    spark.conf.set(MAX_ROWS, "700")
    spark.conf.set(LARGE, str(large).lower())
    try:
        df = (
            spark.range(0, 5000, 1, 3)
            .mapInArrow(with_batch_sizes, "id long, batch long")
            .select(
                (F.col("id") % 7).alias("ev"),
                F.expr("cast(concat('m', lpad(cast(id as string), 5, '0')) as binary)").alias("mark"),
                F.when(F.col("id") % 11 == 0, F.lit(None)).otherwise(F.col("id")).alias("n"),
                "batch",
            )
            .repartition(2, "n")
            .sortWithinPartitions("ev", "mark")
        )
        sc = spark.sparkContext
        sc.setLocalProperty("spark.jobGroup.id", f"handed-{large}")
        sc.setLocalProperty(MAX_ROWS, "9")  # the thread's own, put back after
        try:
            with sql_settings_in_tasks(
                spark, map_stages="batches handed"
            ):  # the map stage's Python function reads the session's row cap
                parts = arrow_batches(df).mapPartitions(lambda batches: [list(batches)]).collect()
            assert sc.getLocalProperty(MAX_ROWS) == "9" and sc.getLocalProperty("callSite.short") is None
            assert sc.getLocalProperty("spark.jobGroup.id") == f"handed-{large}"
            with pytest.raises(RuntimeError), sql_settings_in_tasks(spark, map_stages="never run"):
                raise RuntimeError
            assert sc.getLocalProperty(MAX_ROWS) == "9" and sc.getLocalProperty("callSite.short") is None
        finally:
            sc.setLocalProperty(MAX_ROWS, None)
            sc.setLocalProperty("spark.jobGroup.id", None)
        assert _stage_names(spark, f"handed-{large}") >= {"batches handed"}  # the collect's is PySpark's own
        expected = [[r.asDict() for r in part] for part in df.rdd.glom().collect()]
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    rows = [[row for b in part for row in b.to_pylist()] for part in parts]
    assert [[{k: v for k, v in r.items() if k != "batch"} for r in part] for part in rows] == [
        [{k: v for k, v in r.items() if k != "batch"} for r in part] for part in expected
    ]
    assert sum(map(len, expected)) == 5000 and all(expected)
    assert max(r["batch"] for part in rows for r in part) == 700
    for part in parts:
        assert [b.num_rows for b in part[:-1]] == [700] * (len(part) - 1) and 0 < part[-1].num_rows <= 700
        assert part[0].schema.field("mark").type == (pa.large_binary() if large else pa.binary())
