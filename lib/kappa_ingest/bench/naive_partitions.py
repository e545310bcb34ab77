"""The naive form of the ``kafka-python`` sink, as a user would first write it: Spark reads
the CSV, each partition opens a kafka-python producer (its defaults) and sends one
``json.dumps`` of each Row. Run as ``python -m kappa_ingest.bench.naive_partitions FILE
TOPIC SERVERS MASTER PARTITIONS``; prints its timing."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime


def main(path: str, topic: str, servers: str, master: str, partitions: str) -> None:
    from kappa_ingest.spark.session import build_session

    started = time.monotonic()
    spark = build_session(
        "naive partitions", master, start_up_aids=False
    )  # the same jars and logging, nothing else of ours
    # As many producers as kappa-ingest gets (a small input is one split, so one task otherwise).
    df = spark.read.option("header", True).option("escape", '"').csv(path).repartition(int(partitions))

    def send(rows: Iterator) -> Iterator[tuple[float, float, int]]:  # type: ignore[type-arg]
        from kafka import KafkaProducer

        began, sent = time.time(), 0
        producer = KafkaProducer(bootstrap_servers=servers.split(","))
        for row in rows:
            record = {"ingest_ts": datetime.now(UTC).isoformat(), "source_file": path, "data": row.asDict()}
            producer.send(topic, json.dumps(record).encode())
            sent += 1
        producer.flush()
        yield began, time.time(), sent

    # Timed like kappa-ingest's ingest_s: the sending tasks' span, not the job set-up.
    spans = df.rdd.mapPartitions(send).collect()
    ingest_s = max(end for _, end, _ in spans) - min(began for began, _, _ in spans)
    done = time.monotonic()
    spark.stop()
    print(
        json.dumps({"rows": sum(n for _, _, n in spans), "ingest_s": ingest_s, "startup_s": done - started - ingest_s})
    )


if __name__ == "__main__":
    main(*sys.argv[1:6])
