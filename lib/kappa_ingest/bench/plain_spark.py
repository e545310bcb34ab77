"""Plain Spark, as a user would write it with default settings:
``spark.read.csv`` → ``to_json(struct(*))`` → ``write.format("kafka")``, and the same with
what a kappa-ingest option does, written as a user would: a schema, an encoding, an event
time (``to_timestamp``) with a key, a replay ordered by it (``repartition`` + sort). Run as
``python -m kappa_ingest.bench.plain_spark FILE TOPIC SERVERS MASTER [options]``; prints its timing."""

from __future__ import annotations

import argparse
import json
import time

from pyspark.sql import functions as F


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("topic")
    p.add_argument("servers")
    p.add_argument("master")
    p.add_argument("--schema", help="a DDL schema of every column, in order")
    p.add_argument("--encoding")
    p.add_argument("--multiline", action="store_true")
    p.add_argument("--event-time", help="a column parsed with to_timestamp, the record's timestamp")
    p.add_argument("--key", help="a column sent as the record's key")
    p.add_argument("--ordered", action="store_true", help="each key's rows in one task, sorted by event time")
    a = p.parse_args(argv)
    from kappa_ingest.spark.session import build_session

    started = time.monotonic()
    spark = build_session(
        "plain spark", a.master, start_up_aids=False
    )  # the same jars and logging, nothing else of ours
    ready = time.monotonic()
    reader = spark.read.option("header", True).option("escape", '"')
    if a.encoding:
        reader = reader.option("encoding", a.encoding)
    if a.multiline:
        reader = reader.option("multiLine", True)
    if a.schema:
        reader = reader.schema(a.schema)
    df = reader.csv(a.path)
    columns = [F.col(c) for c in df.columns]
    if a.event_time:
        df = df.withColumn("timestamp", F.to_timestamp(F.col(a.event_time)))
    if a.ordered:
        df = df.repartition(spark.sparkContext.defaultParallelism, F.col(a.key)).sortWithinPartitions("timestamp")
    out = df.select(
        *([F.col(a.key).cast("string").alias("key")] if a.key else []),
        F.to_json(F.struct(*columns)).alias("value"),
        *([F.col("timestamp")] if a.event_time else []),
    )
    out.write.format("kafka").option("kafka.bootstrap.servers", a.servers).option("topic", a.topic).save()
    done = time.monotonic()
    spark.stop()
    print(json.dumps({"rows": None, "ingest_s": done - ready, "startup_s": ready - started}))


if __name__ == "__main__":
    main()
