"""The classic script this tool replaces: one Python process, the csv module, kafka-python,
one record per row. Run as ``python -m kappa_ingest.bench.classic_script FILE TOPIC SERVERS ROWS``;
prints its own timing as JSON."""

from __future__ import annotations

import csv
import json
import sys
import time
from datetime import UTC, datetime

from kafka import KafkaProducer


def main(path: str, topic: str, servers: str, limit: int) -> None:
    started = time.monotonic()
    producer = KafkaProducer(bootstrap_servers=servers.split(","))  # its defaults, as the script has them
    ready = time.monotonic()
    sent = 0
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if sent >= limit:
                break
            record = {"ingest_ts": datetime.now(UTC).isoformat(), "source_file": path,
                      "data": {k: (v if v != "" else None) for k, v in row.items()}}  # fmt: skip
            producer.send(topic, json.dumps(record).encode())
            sent += 1
    producer.flush()
    done = time.monotonic()
    print(json.dumps({"rows": sent, "ingest_s": done - ready, "startup_s": ready - started}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
