"""Independent readings for the tests: what Python's csv module makes of a file, and what a
consumer reads back from the topic."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition


def csv_rows(path: str | Path, delimiter: str = ",", encoding: str = "utf-8-sig", header: bool = True):
    """(columns, good rows as dicts with '' -> None, number of ragged rows), by the csv module."""
    raw = gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")
    with io.TextIOWrapper(raw, encoding=encoding, newline="") as f:
        rows = [r for r in csv.reader(f, delimiter=delimiter) if r]
    columns = rows[0] if header else [f"_c{i}" for i in range(len(rows[0]))]
    body = rows[1:] if header else rows
    good = [
        dict(zip(columns, [v if v != "" else None for v in r], strict=True)) for r in body if len(r) == len(columns)
    ]
    return columns, good, sum(1 for r in body if len(r) != len(columns))


@dataclass
class Record:
    key: bytes | None
    value: dict
    raw_value: bytes
    timestamp_ms: int
    headers: dict[str, bytes]
    partition: int
    offset: int = -1


def consume_all(
    bootstrap: str, topic: str, timeout_s: float = 60, json_values: bool = True, isolation: str = "read_committed"
) -> list[Record]:
    """Every committed record in ``topic``, as a ``read_committed`` consumer reads it from the
    beginning to the high watermarks taken now (``read_uncommitted``: aborted ones and those
    of open transactions too). A transaction left open holds a read_committed consumer back:
    then this times out, naming the partitions."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{time.time_ns()}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})  # fmt: skip
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = high_watermarks(bootstrap, topic)
        todo = {p for p in parts if ends[p] > 0}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])  # the first kept: records may be deleted
        out: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while todo:
            assert time.monotonic() < deadline, f"timed out reading {topic}: partitions {todo} not at {ends}"
            for m in c.consume(10000, timeout=0.05):  # waits out its timeout unless the batch fills
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    if m.offset() >= ends[m.partition()]:
                        todo.discard(m.partition())
                    continue
                out.append(
                    Record(
                        m.key(),
                        json.loads(m.value()) if json_values else None,
                        m.value(),
                        m.timestamp()[1],
                        dict(m.headers() or []),
                        m.partition(),
                        m.offset(),
                    )
                )
        return out
    finally:
        c.close()


def high_watermarks(bootstrap: str, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
    """Each partition's high watermark: records appended, committed or not, and markers. A
    topic just made may not have its leaders yet: asked again until it does (bounded)."""
    from confluent_kafka import KafkaException

    settling = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                parts = c.list_topics(topic, timeout=10).topics[topic].partitions
                return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
            except KafkaException as e:
                if e.args[0].code() not in settling or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def last_stable_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's last stable offset: where a read_committed reader must stop until the
    earliest transaction still open there ends (the high watermark when none is open)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


def held_back(bootstrap: str, topic: str) -> bool:
    """Whether a transaction left open holds read_committed readers of ``topic`` back."""
    stable, high = last_stable_offsets(bootstrap, topic), high_watermarks(bootstrap, topic)
    return any(stable[p] < high[p] for p in high)


def delete_records(bootstrap: str, topic: str, before: dict[int, int], work_dir: Path) -> None:
    """Delete ``topic``'s records below the offsets ``before`` (per partition) as an operator
    does, with Kafka's own kafka-delete-records (its DeleteRecordsCommand, from the broker's jars)."""
    from kappa_ingest.kafka.broker import jars_dir

    spec = work_dir / "delete-records.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": p, "offset": o}
                                                             for p, o in before.items()]}))  # fmt: skip
    done = subprocess.run(["java", "-Xmx128m", "-cp", f"{jars_dir()}/*", "org.apache.kafka.tools.DeleteRecordsCommand",
                           "--bootstrap-server", bootstrap, "--offset-json-file", str(spec)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "error" not in done.stdout.lower(), done.stdout + done.stderr


def rows(records: list[Record]) -> Counter[str]:
    """The multiset of the records' ``data``, each as canonical JSON."""
    return Counter(json.dumps(r.value["data"], sort_keys=True) for r in records)


def expected_rows(path: str | Path, **kwargs) -> Counter[str]:
    """The multiset of a CSV file's good rows, read by Python's csv module."""
    _, good, _ = csv_rows(path, **kwargs)
    return Counter(json.dumps(row, sort_keys=True) for row in good)


def iso_ms_to_epoch(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def run(spark, kafka, tmp_path, **options):
    """Ingest with the given options into a fresh topic; (config, summary.json, records read back)."""
    from kappa_ingest import config
    from kappa_ingest.ingest import ingest

    values = {"topic": f"t-{tmp_path.name}", "bootstrap_servers": kafka.bootstrap_servers,
              "metrics_dir": str(tmp_path / "metrics"), **options}  # fmt: skip
    cfg = config.validate(values)
    ingest(cfg, spark, echo=False)
    summary = json.loads((tmp_path / "metrics" / "runs" / cfg.run_id / "summary.json").read_text())
    records = [] if cfg.dry_run else consume_all(kafka.bootstrap_servers, cfg.topic)
    return cfg, summary, records


def split_by_rule(read_line, start: int, end: int, skip: bool) -> list[bytes]:
    """The lines Hadoop's LineRecordReader gives a split, line by line: ``read_line(pos)``
    is ``(line, next position)`` or None at the end; a split after the first (``skip``)
    skips the line it begins in, and lines are read while the position is at or before
    the split's end."""
    pos, out = start, []
    if skip:
        first = read_line(pos)
        if first is None:
            return []
        pos = first[1]
    while pos <= end and (line := read_line(pos)) is not None:
        out.append(line[0])
        pos = line[1]
    return out


def cluster_recipe(master_url: str, driver_host: str, archive: Path | None) -> list[str]:
    """spark-submit.sh as the README's cluster recipe has it, two one-core executors, up to
    the job's own settings and script. Without ``archive`` the executors run this venv's
    Python, on the disk the lab's hosts share (unpacking the venv costs each executor
    ~15 CPU-s: the recipe's own test ships it, the fault tests need not)."""
    root = Path(__file__).resolve().parents[1]
    python = ["--archives", f"{archive}#venv", "--conf", "spark.pyspark.python=./venv/bin/python"] if archive else [
        "--conf", f"spark.pyspark.python={sys.executable}"]  # fmt: skip
    return [str(root / "spark-submit.sh"), "--master", master_url, "--conf", f"spark.driver.host={driver_host}",
            "--total-executor-cores", "2", "--executor-cores", "1", "--executor-memory", "512m", *python]  # fmt: skip


# The suite's S3 secret (conftest puts it in the environment before any JVM starts).
S3_SECRET = "kappa-s3-secret-" + os.urandom(6).hex()


def s3_filesystem(store):
    from pyarrow import fs

    return fs.S3FileSystem(access_key="kappa-local", secret_key=S3_SECRET, region="us-east-1", scheme="http",
                           endpoint_override=store.endpoint.removeprefix("http://"), allow_bucket_creation=True)  # fmt: skip


def lab_s3_put(lab, store, key: str, data: Path) -> str:
    """A file as the object ``landing/key`` of the lab's store, put from the lab's driver host
    by ``kappa-ingest s3 put`` (the suite's credentials file in the environment); its URI."""
    from kappa_ingest.lab import hosts

    cli = str(Path(sys.executable).parent / "kappa-ingest")
    uri = f"s3://landing/{key}"
    subprocess.run([*lab.net.exec(hosts.DRIVER), cli, "s3", "put", str(data), uri, "--s3-endpoint", store.endpoint],
                   capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return uri


def s3_put(store, key: str, data: bytes | Path) -> str:
    """``data`` (or a file's bytes) as the object ``landing/key``, through the S3 API; its URI."""
    body = data.read_bytes() if isinstance(data, Path) else data
    # compression=None: pyarrow would otherwise gzip an object named .gz once more on its way in
    with s3_filesystem(store).open_output_stream(f"landing/{key}", compression=None) as out:
        out.write(body)
    return f"s3://landing/{key}"


def random_lines(rnd, n: int) -> bytes:
    """``n`` random lines of CSV-ish bytes (quotes, commas, UTF-8), each ended by LF, CRLF,
    a lone CR or a mix; the last line end kept or not: input for the split readers."""
    pieces = []
    for _ in range(n):
        line = bytes(rnd.choice(b'ab,"\xc3\xa9 ') for _ in range(rnd.choice([0, 0, 1, 3, 10, 40])))
        pieces.append(line + rnd.choice([b"\n", b"\n", b"\r\n", b"\r", b"\r\r\n", b"\n\r"]))
    text = b"".join(pieces)
    return text if rnd.random() < 0.5 else text.rstrip(b"\r\n")
