"""An ordered replay's rows reach the part computed for them through Spark's own hash
partitioning (kappa_ingest.source.line_shuffle.part_tokens)."""

from __future__ import annotations

from pyspark.sql import functions as F

from kappa_ingest.source.line_shuffle import _spark_hash_int, part_tokens


def test_the_hash_is_sparks_own(spark):
    values = [*range(-300, 3000), 2**31 - 1, -(2**31)]
    df = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h"))
    assert all(_spark_hash_int(r.v) == r.h for r in df.collect())


def test_each_token_lands_in_its_own_part(spark):
    for parts in (1, 2, 3, 5, 16, 64):
        tokens = [int(t) for t in part_tokens(parts)]
        assert len(set(tokens)) == parts and min(tokens) >= 0
        df = spark.createDataFrame([(t,) for t in tokens], "v int").repartition(parts, F.col("v"))
        assert [[r.v for r in part] for part in df.rdd.glom().collect()] == [[t] for t in tokens]
