"""``make soak``: 10M wide30 rows (~2.4 GB) through each sink into the embedded broker (and
once more through the confluent sink with the input read from a local S3 server), read
back and checked row by row, with the peak memory of the whole process tree.

Each row is checked by a 64-bit hash of its fields (polars' hash of the row as a struct,
the same seed on both sides): the input's hashes, read with polars in batches, and the topic's, read back
``read_committed`` and decoded in batches of half a million records, must be the same
multiset. The rows' count and every row's content are therefore checked without holding
10M rows in Python objects. Not part of ``make test``: it takes ~20 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from kappa_ingest import datagen
from kappa_ingest.bench import store as bench_store
from kappa_ingest.bench.monitor import Usage, run_measured
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.s3.server import LocalS3

SINKS = ("confluent", "spark", "kafka-python", "confluent-from-s3")  # the last: the input read from a local S3 server
BATCH = 500_000


@dataclass
class SoakResult:
    sink: str
    rows: int
    rows_sent: int
    rows_read_back: int
    rows_match: bool
    command_to_exit_s: float
    sending_s: float
    rows_per_s: float
    peak_tree_rss_mb: float
    read_back_s: float


def _row_hash(columns: list[str]) -> pl.Expr:
    return pl.struct(columns).hash(7).alias("h")


def input_hashes(path: Path) -> tuple[list[str], np.ndarray]:
    """The CSV's columns and one hash per row (every field as text, empty as null), streamed."""
    columns = pl.read_csv(path, n_rows=0).columns
    hashes = pl.scan_csv(path, infer_schema=False).select(_row_hash(columns)).collect(engine="streaming")
    return columns, np.sort(hashes["h"].to_numpy())


def topic_hashes(bootstrap: str, topic: str, columns: list[str], timeout_s: float = 1800) -> np.ndarray:
    """One hash per record's ``data`` in ``topic``, read ``read_committed`` from the start."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from kappa_ingest.kafka.topics import high_watermarks

    dtype = pl.Struct({"data": pl.Struct(dict.fromkeys(columns, pl.String))})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "fetch.max.bytes": 64 << 20})  # fmt: skip
    parts, values = [], []

    def flush() -> None:
        frame = pl.DataFrame({"v": pl.Series(values, dtype=pl.Binary).cast(pl.String)})
        data = frame.select(pl.col("v").str.json_decode(dtype).struct.field("data").struct.unnest())
        parts.append(data.select(_row_hash(columns))["h"].to_numpy())
        values.clear()

    try:
        n = len(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = high_watermarks({"bootstrap.servers": bootstrap}, topic, n)
        todo = {p for p, end in ends.items() if end > 0}
        c.assign([TopicPartition(topic, p, 0) for p in todo])
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=0.5):
                if m.error() is None:
                    values.append(m.value())
                elif m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]:
                    todo.discard(m.partition())
            if len(values) >= BATCH:
                flush()
        if todo:
            raise RuntimeError(f"reading {topic} back timed out; partitions {sorted(todo)} not at their end")
        if values:
            flush()
    finally:
        c.close()
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)


def run_sink(
    row: str, data: Path, bootstrap: str, work: Path, partitions: int, store: LocalS3 | None = None
) -> tuple[dict, Usage]:
    """One ``kappa-ingest ingest`` run (``row``: a sink, or ``SINK-from-s3`` with the input
    in ``store``): its summary, and its process tree's wall time and peak RSS."""
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    run_id = f"soak-{row}-{int(time.time())}"
    sink, _, source = row.partition("-from-")
    where = [str(data)] if not source else [bench_store.uri(data), "--s3-endpoint", store.endpoint]  # type: ignore[union-attr]
    cmd = [cli, "ingest", "--input", *where, "--topic", f"soak-{row}", "--sink", sink,
           "--bootstrap-servers", bootstrap, "--master", f"local[{partitions}]", "--partitions", str(partitions),
           "--metrics-dir", str(work / "metrics"), "--run-id", run_id, "--quiet"]  # fmt: skip
    usage = run_measured(cmd, env={**os.environ, **bench_store.environment(store)} if source else None)
    if usage.returncode != 0:
        raise RuntimeError(f"the {row} run exited {usage.returncode}: {usage.stderr[-1000:]}")
    return json.loads((work / "metrics" / "runs" / run_id / "summary.json").read_text()), usage


def run_soak(rows: int, data_dir: Path, out_root: Path, sinks: list[str], partitions: int) -> Path:
    data = data_dir / f"wide30-{rows}.csv"
    if not data.exists():
        print(f"generating {data} ...", flush=True)
        datagen.generate("wide30", rows, data)
    columns, expected = input_hashes(data)
    print(f"input: {data} ({data.stat().st_size / 2**30:.2f} GiB, {len(expected):,} rows)", flush=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = out_root / f"soak-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="kappa-soak-") as tmp:
        cluster = local_kafka.start(Path(tmp) / "kafka", heap="1g")
        store = None
        try:
            if any("-from-" in s for s in sinks):
                store = bench_store.start(Path(tmp) / "s3")
                bench_store.put(store, data)
            for sink in sinks:
                summary, usage = run_sink(sink, data, cluster.bootstrap_servers, Path(tmp), partitions, store)
                t0 = time.monotonic()
                got = topic_hashes(cluster.bootstrap_servers, f"soak-{sink}", columns)
                result = SoakResult(sink, len(expected), summary["rows_sent"], len(got),
                                    bool(len(got) == len(expected) and np.array_equal(got, expected)),
                                    round(usage.wall_s, 1), summary["ingest_s"], summary["rows_per_s"],
                                    round(usage.peak_rss_mb), round(time.monotonic() - t0, 1))  # fmt: skip
                print(json.dumps(asdict(result)), flush=True)
                results.append(result)
                with Admin(cluster.bootstrap_servers, timeout_s=60) as admin:  # its disk back before the next sink
                    admin.delete_topic(f"soak-{sink}")
        finally:
            cluster.stop()
            if store is not None:
                store.stop()
    (out / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    print(f"results: {out / 'results.json'}")
    if not all(r.rows_match and r.rows_sent == r.rows for r in results):
        raise SystemExit("soak: a sink lost, duplicated or changed rows (see results.json)")
    return out
