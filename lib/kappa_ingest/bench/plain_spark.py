"""Plain Spark, as a user would write it with default settings:
``spark.read.csv`` → ``to_json(struct(*))`` → ``write.format("kafka")``. Run as
``python -m kappa_ingest.bench.plain_spark FILE TOPIC SERVERS PARTITIONS``; prints its timing."""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import functions as F


def main(path: str, topic: str, servers: str, master: str) -> None:
    from kappa_ingest.spark_session import build_session

    started = time.monotonic()
    spark = build_session("plain spark", master, start_up_aids=False)  # the same jars and logging, nothing else of ours
    ready = time.monotonic()
    df = spark.read.option("header", True).option("escape", '"').csv(path)
    out = df.select(F.to_json(F.struct(*df.columns)).alias("value"))
    out.write.format("kafka").option("kafka.bootstrap.servers", servers).option("topic", topic).save()
    done = time.monotonic()
    spark.stop()
    print(json.dumps({"rows": None, "ingest_s": done - ready, "startup_s": ready - started}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
