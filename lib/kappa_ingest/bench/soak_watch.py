"""``make soak-watch``: a watch over a landing directory for 30 minutes (``--minutes``),
files of random sizes landing at random intervals (written beside it and renamed in), the
broker restarted and an executor killed (``kill -9``) on the way. At the end every row of
every file must be in the topic exactly once (a 64-bit hash per row, both sides, as ``make
soak`` checks), and the memory and latency must be flat: the watch's driver (Python and
its JVM) at the end within 10% of its size at the tenth minute, and the median latency of
the last third of the files within 1.5x that of the first third.

The watch runs on ``local-cluster[2,1,1024]`` (two executor JVMs, one of which is killed),
``--after-send move:DIR`` (the landing stays small), exactly-once. Not part of ``make test``.
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
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil

from kappa_ingest import datagen
from kappa_ingest.bench.soak import input_hashes, topic_hashes
from kappa_ingest.kafka import broker as local_kafka

TOPIC = "soak-watch"


@dataclass
class WatchSoak:
    minutes: float
    files: int = 0
    rows: int = 0
    rows_read_back: int = 0
    rows_match: bool = False
    batches: int = 0
    batches_failed: int = 0
    broker_restarted_at_s: float | None = None
    executor_killed_at_s: float | None = None
    driver_rss_mb: dict[str, float] = field(default_factory=dict)  # minute -> MB (driver Python + JVM)
    tree_rss_mb: dict[str, float] = field(default_factory=dict)  # minute -> MB (with executors and workers)
    latency_s: dict[str, float] = field(default_factory=dict)  # p50/p99 of all files, medians of first/last third
    memory_flat: bool = False
    latency_flat: bool = False
    exit_code: int | None = None


def _rss(proc: psutil.Process, tree: bool) -> float:
    procs = [proc, *proc.children(recursive=True)] if tree else [proc, *_jvms(proc)]
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def _jvms(proc: psutil.Process) -> list[psutil.Process]:
    """The driver's JVM (its direct java child), not the executors under it."""
    return [c for c in proc.children() if "java" in c.name()]


def _executors(proc: psutil.Process) -> list[psutil.Process]:
    out = []
    for p in proc.children(recursive=True):
        try:
            if any("CoarseGrainedExecutorBackend" in a for a in p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _wait(what, timeout_s: float, why: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        if time.monotonic() > deadline:
            raise RuntimeError(f"soak-watch: not {why} within {timeout_s:.0f} s")
        time.sleep(0.5)


# Long: the soak is one sequence of steps on one clock; split, it would pass half its state around.
def run_soak_watch(minutes: float, out_root: Path, seed: int = 7) -> Path:
    rnd = random.Random(seed)
    out = out_root / f"soak-watch-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="kappa-soak-watch-"))
    landing, done, metrics, scratch = (work / d for d in ("landing", "done", "metrics", "scratch"))
    for d in (landing, done, scratch):
        d.mkdir()
    cluster = local_kafka.start(work / "kafka", brokers=1)
    result = WatchSoak(minutes)
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    log = out / "watch.log"
    cmd = [cli, "watch", "--input", str(landing), "--topic", TOPIC, "--bootstrap-servers", cluster.bootstrap_servers,
           "--metrics-dir", str(metrics), "--master", "local-cluster[2,1,1024]", "--after-send", f"move:{done}",
           "--min-file-age", "0.5", "--run-id", "soak-watch", "--delivery", "exactly-once"]  # fmt: skip
    with open(log, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    watch = psutil.Process(proc.pid)
    hashes: list[np.ndarray] = []
    columns: list[str] = []
    try:
        _wait(lambda: "watching " in log.read_text(), 300, "watching")
        start = time.monotonic()
        end = start + minutes * 60
        sampled = 0

        def sample() -> None:
            nonlocal sampled
            while time.monotonic() < end + 5 and proc.poll() is None:
                minute = int((time.monotonic() - start) // 60)
                if minute >= sampled:
                    result.driver_rss_mb[str(minute)] = round(_rss(watch, tree=False), 1)
                    result.tree_rss_mb[str(minute)] = round(_rss(watch, tree=True), 1)
                    sampled = minute + 1
                time.sleep(1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        restart_at, kill_at = start + minutes * 60 * 0.4, start + minutes * 60 * 0.6
        n = 0
        while time.monotonic() < end:
            n += 1
            rows = int(rnd.choice([100, 1_000, 10_000, 50_000]) * rnd.uniform(0.5, 1.5))
            name = f"f{n:05d}.csv"
            datagen.generate("debs2012", rows, scratch / name, seed=n)
            columns, h = input_hashes(scratch / name)
            hashes.append(h)
            os.utime(scratch / name)  # its landing (the latency's start) is now, not when it was written
            os.replace(scratch / name, landing / name)
            result.files, result.rows = n, result.rows + rows
            now = time.monotonic()
            if result.broker_restarted_at_s is None and now >= restart_at:
                os.kill(cluster.brokers[0].pid, signal.SIGKILL)
                time.sleep(10)  # down for 10 s, files landing meanwhile wait
                cluster = local_kafka.restart(cluster)
                result.broker_restarted_at_s = round(now - start, 1)
                print(f"soak-watch: broker restarted at {result.broker_restarted_at_s} s", flush=True)
            if result.executor_killed_at_s is None and now >= kill_at:
                victims = _executors(watch)
                if victims:
                    victims[0].send_signal(signal.SIGKILL)
                    result.executor_killed_at_s = round(now - start, 1)
                    print(
                        f"soak-watch: executor {victims[0].pid} killed at {result.executor_killed_at_s} s", flush=True
                    )
            time.sleep(rnd.expovariate(1 / 4.0))  # a file every 4 s on average
        _wait(lambda: len(list(landing.glob("*.csv"))) == 0, 600, "every file sent and moved")
        proc.send_signal(signal.SIGTERM)
        result.exit_code = proc.wait(60)
        sampler.join(10)
        expected = np.sort(np.concatenate(hashes))
        got = topic_hashes(cluster.bootstrap_servers, TOPIC, columns)
        result.rows_read_back = len(got)
        result.rows_match = bool(len(got) == len(expected) and np.array_equal(np.sort(got), expected))
        _latencies(result, metrics)
        _batches(result, log)
        ten, last = result.driver_rss_mb.get("10"), list(result.driver_rss_mb.values())[-1]
        result.memory_flat = ten is not None and abs(last - ten) <= 0.1 * ten
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    (out / "soak-watch.json").write_text(json.dumps(asdict(result), indent=2))
    print(json.dumps(asdict(result), indent=2))
    print(f"soak-watch: {out}")
    return out


def _latencies(result: WatchSoak, metrics: Path) -> None:
    from kappa_ingest.report.store import rows as table_rows

    rows = table_rows(metrics, "watch_files", order_by="committed_at")
    lat = [r["latency_s"] for r in rows]
    if not lat:
        return
    third = max(1, len(lat) // 3)
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [lat[0]] * 99
    result.latency_s = {"p50": round(q[49], 2), "p99": round(q[98], 2), "first_third_median": round(
        statistics.median(lat[:third]), 2), "last_third_median": round(statistics.median(lat[-third:]), 2)}  # fmt: skip
    result.latency_flat = result.latency_s["last_third_median"] <= 1.5 * result.latency_s["first_third_median"]


def _batches(result: WatchSoak, log: Path) -> None:
    lines = [line for line in log.read_text().splitlines() if line.startswith("batch ")]
    result.batches = len(lines)
    result.batches_failed = sum(1 for line in lines if ": failed" in line)
