"""``kappa-ingest bench --watch-start``: how a watch over a directory that received a
million files starts: a ledger of that many entries (one unit per file, as a landing's
small files are) written to the embedded broker, then, in a fresh process, what a watch
does with the ledger before it looks at its directory (the topic's lock taken, the whole
ledger read into its view of what was sent), timed, with that process's peak and final RSS:
once over a landing the files were moved away from (``--after-send move`` or ``delete``: each
kept by its identity alone), once over one that still holds them all (``keep``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from kappa_ingest.kafka import broker as local_kafka

LEDGER = "_kappa_ingest_ledger"
TOPIC = "landing"
CHUNK = 100_000


def _fill(bootstrap: str, entries: int) -> float:
    from kappa_ingest.delivery import ledger
    from kappa_ingest.delivery.ledger import Entry
    from kappa_ingest.kafka.topics import Admin
    from kappa_ingest.source.splits import INCREMENTAL_SPLIT_BYTES, Unit

    with Admin(bootstrap) as admin:
        ledger.ensure(admin, LEDGER)
    began = time.perf_counter()
    for first in range(0, entries, CHUNK):
        chunk = [Entry(TOPIC, Unit(f"/landing/export-{i:07d}.csv", 0, 2400, 0, 1), 2400, 1_764_000_000_000 + i,
                       "r-fill", "r-fill", "exactly-once", 11, 10, 10, 0, 2300, split_bytes=INCREMENTAL_SPLIT_BYTES)
                 for i in range(first, min(entries, first + CHUNK))]  # fmt: skip
        ledger.write_records({"bootstrap.servers": bootstrap}, LEDGER, [e.record() for e in chunk], 300)
    return time.perf_counter() - began


def _landing(entries: int) -> list:
    """The landing as ``--after-send keep`` leaves it: every file the ledger has sent still there."""
    from kappa_ingest.watch.landing import Landed

    return [Landed(f"/landing/export-{i:07d}.csv", 2400, 1_764_000_000_000 + i) for i in range(entries)]


def measure(bootstrap: str, kept: int) -> dict:
    """In this (fresh) process: the lock taken and the ledger read, as a watch starts over
    a landing that holds ``kept`` of the files sent (0: all moved away)."""
    import resource

    import psutil

    from kappa_ingest.delivery import lock
    from kappa_ingest.watch.delivered import Delivered

    conf = {"bootstrap.servers": bootstrap}
    landing = _landing(kept)  # the listing's own memory is counted in "before"
    before = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    held = lock.acquire(conf, {"bootstrap_servers": bootstrap}, LEDGER, TOPIC, "bench-start", "bench-start",
                        "kappa-ingest-bench:", lease_s=60)  # fmt: skip
    t1 = time.perf_counter()
    view = Delivered(conf, LEDGER, TOPIC, "/landing", multiline=False)
    view.catch_up(present=landing)
    t2 = time.perf_counter()
    held.release()
    return {"landing": "empty" if not landing else f"{len(landing):,} files", "lock_s": round(t1 - t0, 2),
            "ledger_read_s": round(t2 - t1, 2), "records_read": view.records_read, "files_known": view.sizes(),
            "rss_before_mb": round(before / 2**20), "rss_after_mb": round(psutil.Process().memory_info().rss / 2**20),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}  # fmt: skip


def run_watch_start(out_root: Path, entries: int, command: str) -> dict:
    work = Path(tempfile.mkdtemp(prefix="kappa-bench-start-"))
    cluster = local_kafka.start(work / "kafka", brokers=1, heap="1g")
    try:
        fill_s = _fill(cluster.bootstrap_servers, entries)
        results: dict = {"command": command, "entries": entries, "fill_s": round(fill_s, 1)}
        for name, kept in (("files_moved_away", 0), ("files_kept", entries)):  # --after-send move or delete; keep
            done = subprocess.run([sys.executable, "-m", "kappa_ingest.bench.watch_start", cluster.bootstrap_servers,
                                   str(kept)], capture_output=True, text=True, timeout=1800)  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"bench --watch-start: {done.stderr[-2000:]}")
            results[name] = json.loads(done.stdout)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    folder = out_root / f"watch-start-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    print(f"bench --watch-start: {folder}")
    return results


if __name__ == "__main__":
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
