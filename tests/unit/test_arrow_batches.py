"""Rows handed from the JVM to the Python workers: narrow rows in batches of the row cap
alone, Spark's byte cap (and its sizing after every row) lifted for the jobs inside and the
session's setting given back after; Arrow's vectors written without index checks."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from kappa_ingest.spark.arrow_batches import MAX_BYTES, MAX_ROWS, unsized_batches


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
