"""``kappa-ingest bench --watch-lab``: what a watch's batch costs beyond its sending when the
broker is far away.

One broker on a lab host of its own, behind its delaying proxy (:mod:`kappa_ingest.lab`);
the watch runs on the lab's driver host (``local[2]``, exactly-once). Files of 10,000 rows
are renamed into its landing one at a time, each once the last is in, first with the link
unshaped, then at each round trip. A batch's overhead is its time from its start to its
report (``wall_s`` of its summary.json: its Delta rows are appended after, on a thread of
the watch's own) less its sending stage (``ingest_s``): the driver's own work and Kafka round trips around the
sending. Target: under 1 s at 100 ms of round trip.

Needs root (network namespaces). Writes ``bench-results/watch-lab-<timestamp>/results.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from kappa_ingest import datagen
from kappa_ingest.lab import hosts
from kappa_ingest.lab.hosts import DRIVER

RTTS_MS = (0.0, 100.0)
TARGET_S = 1.0  # a batch's overhead over its sending at 100 ms
BROKER = "b1"


def run_watch_lab(out_root: Path, files: int = 8, rows: int = 10_000, command: str = "") -> dict:
    if os.geteuid() != 0:
        raise SystemExit("watch-lab: the lab's network namespaces need root")
    started = datetime.now(UTC)
    out = out_root / f"watch-lab-{started:%Y%m%dT%H%M%SZ}"
    work = out / "work"
    landing, scratch, metrics = work / "landing", work / "scratch", work / "metrics"
    for d in (landing, scratch):
        d.mkdir(parents=True, exist_ok=True)
    lab = hosts.up(work / "lab", brokers=1)
    results: dict = {"command": command, "files_per_link": files, "rows_per_file": rows, "links": {}}
    try:
        log = work / "watch.log"
        with open(log, "wb") as out_file:
            proc = subprocess.Popen([*lab.net.exec(DRIVER), sys.executable, "-m", "kappa_ingest.cli", "watch", "--input",
                                     str(landing), "--topic", "watch-lab", "--bootstrap-servers", lab.bootstrap_servers,
                                     "--metrics-dir", str(metrics), "--delivery", "exactly-once", "--master", "local[2]",
                                     "--run-id", "watch-lab"], stdout=out_file, stderr=subprocess.STDOUT,
                                    start_new_session=True, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
        try:
            _wait(lambda: "watching " in log.read_text(), 300, proc, log)
            number = 0
            for rtt in RTTS_MS:
                lab.delay(BROKER, rtt)
                batches = []
                for i in range(files):
                    number += 1
                    src = datagen.generate("debs2012", rows, scratch / f"r{int(rtt)}-{i}.csv", seed=number)
                    os.replace(src, landing / src.name)
                    batch = f"watch-lab-b{number:05d}"
                    _wait(lambda b=batch: f"batch {b}: " in log.read_text(), 300, proc, log)
                    batches.append(batch)
                results["links"][f"{rtt:g} ms"] = batches
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        for link, batches in results["links"].items():
            reports = [json.loads((metrics / "runs" / b / "summary.json").read_text()) for b in batches]
            assert all(r["status"] == "succeeded" for r in reports), [r.get("error") for r in reports]
            overhead = [
                r["wall_s"] - r["ingest_s"] for r in reports[1:]
            ]  # the first batch of a link: its clients connect
            results["links"][link] = {
                "batches": batches, "wall_s": [r["wall_s"] for r in reports],
                "sending_s": [r["ingest_s"] for r in reports],
                "phases": [r["phases"] for r in reports],
                "overhead_median_s": round(statistics.median(overhead), 3), "overhead_max_s": round(max(overhead), 3),
            }  # fmt: skip
    finally:
        hosts.down(work / "lab")
        if (work / "watch.log").exists():
            (out / "watch.log").write_text((work / "watch.log").read_text())
        shutil.rmtree(work, ignore_errors=True)
    far = results["links"][f"{RTTS_MS[-1]:g} ms"]["overhead_median_s"]
    results["met"] = {"overhead_at_100ms": far < TARGET_S}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if "median" in kk or "max" in kk}
                      for k, v in results["links"].items()}, indent=2))  # fmt: skip
    print(f"bench --watch-lab: {out}")
    return results


def _wait(condition, timeout_s: float, proc: subprocess.Popen, log: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"bench --watch-lab: the watch stopped or stalled:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)
