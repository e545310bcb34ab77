"""``kappa-ingest bench --watch``: how soon a file renamed into a watched directory is in the
topic, and how fast a backlog drains.

Latency: an idle watch on the embedded broker (exactly-once); 50 files of 10,000 rows,
written beforehand, renamed in one at a time at random intervals (2 s on average); a file's
latency is from its rename to the moment a ``read_committed`` consumer has read its last
record (the consumer counts each file's records by their ``source_file`` header). Targets:
p50 <= 1.5 s, p99 <= 3 s.

Backlog, three rounds: 1,000 files (1,000 rows each) put into the directory at once,
drained in batches of ``--max-files 250``; its rate (rows over the first rename to the moment a
``read_committed`` consumer has read them all) against ``kappa-ingest ingest``'s sending
rate (rows_per_s of its report) on the same files, the broker warmed for both by an
``ingest`` of the same files to a topic of its own before them. That consumer counts
records without decoding them (the per-file one above costs seconds of a core over a
million records, on the two cores the watch runs on, which ``ingest`` is measured
without). Each round's ratio is its drain against its own ``ingest`` (run right after it);
the figure is their median. Target: >= 0.9x.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from kappa_ingest import datagen
from kappa_ingest.kafka import broker as local_kafka

P50_TARGET_S, P99_TARGET_S, BACKLOG_TARGET = 1.5, 3.0, 0.9


class _Reader:
    """A read_committed consumer of ``topic`` from its start, on a thread: each poll's
    records (an event a consumer also returns, a topic not yet made say, left out) go to
    ``_take``."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _take(self, records: list) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"bench-{time.time_ns()}",
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500})  # fmt: skip
        c.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                self._take([m for m in c.consume(100_000, timeout=0.05) if m.error() is None])
        finally:
            c.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class Arrivals(_Reader):
    """When each file's ``expected`` records had all been read (``time.time()``), by their
    ``source_file`` header."""

    def __init__(self, bootstrap: str, topic: str, expected: dict[str, int]) -> None:
        self.expected = expected
        self.counts: dict[str, int] = {}
        self.done_at: dict[str, float] = {}
        super().__init__(bootstrap, topic)

    def _take(self, records: list) -> None:
        for m in records:
            source = dict(m.headers() or []).get("source_file", b"").decode().removeprefix("file:")
            n = self.counts[source] = self.counts.get(source, 0) + 1
            if n == self.expected.get(source):
                self.done_at[source] = time.time()

    def wait(self, paths: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(p in self.done_at for p in paths):
            if time.monotonic() > deadline:
                missing = [p for p in paths if p not in self.done_at]
                raise RuntimeError(f"bench --watch: {len(missing)} file(s) not in the topic in {timeout_s:.0f} s")
            time.sleep(0.05)


class Visible(_Reader):
    """When ``total`` records had all been read (``time.time()``): counted, not decoded."""

    def __init__(self, bootstrap: str, topic: str, total: int) -> None:
        self.total, self.count = total, 0
        self.done_at: float | None = None
        super().__init__(bootstrap, topic)

    def _take(self, records: list) -> None:
        self.count += len(records)
        if self.done_at is None and self.count >= self.total:
            self.done_at = time.time()

    def wait(self, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while self.done_at is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"bench --watch: {self.count:,} of {self.total:,} records in {timeout_s:.0f} s")
            time.sleep(0.05)
        return self.done_at


def _watch(cli: str, landing: Path, topic: str, bootstrap: str, metrics: Path, log: Path, *extra: str):
    out = open(log, "wb")
    proc = subprocess.Popen([cli, "watch", "--input", str(landing), "--topic", topic, "--bootstrap-servers", bootstrap,
                             "--metrics-dir", str(metrics), "--delivery", "exactly-once", "--master", "local[2]",
                             *extra], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    deadline = time.monotonic() + 300
    while "watching " not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"bench --watch: the watch did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    return proc


def _ingest(cli: str, inputs: Path, topic: str, bootstrap: str, metrics: Path) -> dict:
    """``kappa-ingest ingest`` of ``inputs`` as the watch sends them (exactly-once, ``local[2]``): its report."""
    ingest = subprocess.run([cli, "ingest", "--input", str(inputs), "--topic", topic, "--bootstrap-servers", bootstrap,
                             "--metrics-dir", str(metrics), "--run-id", topic, "--delivery", "exactly-once",
                             "--master", "local[2]", "--quiet"], capture_output=True, text=True, timeout=1800,
                            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    if ingest.returncode != 0:
        raise RuntimeError(f"bench --watch: ingest failed: {ingest.stderr[-2000:]}")
    return json.loads((metrics / "runs" / topic / "summary.json").read_text())


def _end(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(30)


def _files(where: Path, n: int, rows: int, prefix: str) -> dict[str, int]:
    where.mkdir(parents=True, exist_ok=True)
    return {str(datagen.generate("debs2012", rows, where / f"{prefix}{i:04d}.csv", seed=i)): rows for i in range(n)}


# Long: two measurements on one broker, each a sequence of steps whose order is the method.
# Long: one round's steps, in the order that is the method.
def _backlog_round(cli: str, bs: str, work: Path, i: int, files: list[str], ingest_dir: Path, rows: int) -> dict:
    """A watch drains ``files`` (linked into a landing of its own, renamed in at once), then
    ``ingest`` sends the same files: one round, each to a topic of its own."""
    scratch, landing = work / f"backlog-scratch-{i}", work / f"landing-{i}"
    scratch.mkdir(), landing.mkdir()
    for p in files:
        os.link(p, scratch / Path(p).name)
    total = len(files) * rows
    topic = f"bench-watch-backlog-{i}"
    visible = Visible(bs, topic, total)
    proc = _watch(cli, landing, topic, bs, work / f"m2-{i}", work / f"backlog-{i}.log", "--max-files", "250")
    try:
        time.sleep(3)
        t0 = time.time()
        for p in files:
            os.replace(scratch / Path(p).name, landing / Path(p).name)
        drain_s = visible.wait(1800) - t0
        time.sleep(1)  # a record beyond the total would be one sent twice
    finally:
        visible.stop()
        _end(proc)
    if visible.count != total:
        raise RuntimeError(f"bench --watch: the backlog's topic holds {visible.count:,} records, not {total:,}")
    summary = _ingest(cli, ingest_dir, f"bench-watch-ingest-{i}", bs, work / f"m3-{i}")
    # Where the drain's time went: the watch's batches, their sending stages, and the rest.
    batches = [json.loads(p.read_text()) for p in (work / f"m2-{i}" / "runs").glob("*/summary.json")]
    batches = [b for b in batches if b.get("rows_sent")]
    return {"drain_s": round(drain_s, 2), "rows_per_s": round(total / drain_s),
            "ingest_rows_per_s": round(summary["rows_per_s"]), "ingest_wall_s": summary["wall_s"],
            "x_ingest": round(total / drain_s / summary["rows_per_s"], 2), "batches": len(batches),
            "stages_s": round(sum(b["ingest_s"] or 0 for b in batches), 2),
            "batches_wall_s": round(sum(b["wall_s"] for b in batches), 2), "ingest_stage_s": summary["ingest_s"]}  # fmt: skip


def run_watch_bench(out_root: Path, files: int = 50, rows: int = 10_000, backlog: int = 1000,
                    backlog_rows: int = 1000, seed: int = 11, command: str = "", rounds: int = 3) -> dict:  # fmt: skip
    rnd = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="kappa-bench-watch-"))
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    cluster = local_kafka.start(work / "kafka", brokers=1)
    results: dict = {"command": command, "files": files, "rows_per_file": rows, "backlog_files": backlog,
                     "backlog_rows_per_file": backlog_rows}  # fmt: skip
    try:
        bs = cluster.bootstrap_servers
        # Latency: an idle watch, files renamed in one by one.
        landing, scratch = work / "landing", work / "scratch"
        landing.mkdir()
        written = _files(scratch, files, rows, "l")
        expected = {str(landing / Path(p).name): n for p, n in written.items()}
        arrivals = Arrivals(bs, "bench-watch-latency", expected)
        proc = _watch(cli, landing, "bench-watch-latency", bs, work / "m1", work / "latency.log")
        renamed: dict[str, float] = {}
        try:
            time.sleep(3)  # idle: the first batch's cold start is not a landing's latency
            for src in written:
                time.sleep(rnd.expovariate(1 / 2.0))
                dst = landing / Path(src).name
                renamed[str(dst)] = time.time()
                os.replace(src, dst)
            arrivals.wait(list(expected), 300)
        finally:
            arrivals.stop()
            _end(proc)
        lat = sorted(arrivals.done_at[p] - t for p, t in renamed.items())
        q = statistics.quantiles(lat, n=100, method="inclusive")  # within the samples, not beyond
        results["latency_s"] = {"p50": round(q[49], 3), "p99": round(q[98], 3), "max": round(lat[-1], 3),
                                "min": round(lat[0], 3)}  # fmt: skip
        # Backlog: the watch drains 1,000 files; ingest sends the same files in one run.
        scratch2, ingest_dir = work / "scratch2", work / "ingest-copy"
        written2 = _files(scratch2, backlog, backlog_rows, "b")
        ingest_dir.mkdir()
        for p in written2:
            os.link(p, ingest_dir / Path(p).name)
        # Both measured on a broker warmed the same: its first million records cost it 10 s
        # of a core more than its next (the JIT), which would fall on whichever ran first.
        _ingest(cli, ingest_dir, "bench-watch-warm", bs, work / "m0")
        results["backlog_rounds"] = [_backlog_round(cli, bs, work, i, list(written2), ingest_dir, backlog_rows)
                                     for i in range(1, rounds + 1)]  # fmt: skip
        results["backlog"] = {"rows": backlog * backlog_rows, "rounds": rounds,
                              "x_ingest": statistics.median(r["x_ingest"] for r in results["backlog_rounds"])}  # fmt: skip
    finally:
        cluster.stop()
    results["met"] = {"p50": results["latency_s"]["p50"] <= P50_TARGET_S,
                      "p99": results["latency_s"]["p99"] <= P99_TARGET_S,
                      "backlog": results["backlog"]["x_ingest"] >= BACKLOG_TARGET}  # fmt: skip
    folder = out_root / f"watch-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    folder.mkdir(parents=True, exist_ok=True)
    for log in ["latency.log", *(f"backlog-{i}.log" for i in range(1, rounds + 1))]:
        (folder / log).write_text((work / log).read_text())
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    print(f"bench --watch: {folder}")
    shutil.rmtree(work, ignore_errors=True)
    return results
