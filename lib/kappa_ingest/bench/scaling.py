"""Scaling (``make scaling``): rows/s against partitions (1, 2, 4 at 1M rows) and against
input size (100K, 1M, 10M rows at 2 partitions), with the peak memory of each run, through
the normal entry point. Checks the two promises: memory flat in input size (10M within 20%
of 1M) and cost linear in rows (the broker-side steady rows/s within 15% across sizes:
start-up and ramp excluded)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kappa_ingest import datagen
from kappa_ingest.bench.monitor import run_measured
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.report import plots

PARTITIONS = [1, 2, 4]
SIZES = [100_000, 1_000_000, 10_000_000]


def _run(bootstrap: str, work: Path, data: Path, partitions: int, topic: str) -> dict[str, Any]:
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    run_id = f"scaling-{topic}"
    cmd = [cli, "ingest", "--input", str(data), "--topic", topic, "--bootstrap-servers", bootstrap,
           "--master", f"local[{partitions}]", "--partitions", str(partitions), "--metrics-dir", str(work),
           "--run-id", run_id]  # fmt: skip
    usage = run_measured(cmd, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    if usage.returncode != 0:
        raise RuntimeError(f"scaling run failed: {usage.stderr.strip()[-300:]}")
    s = json.loads((work / "runs" / run_id / "summary.json").read_text())
    return {"rows": s["rows_sent"], "partitions": partitions, "rows_per_s": s["rows_per_s"], "ingest_s": s["ingest_s"],
            "steady_rows_per_s": s["broker"]["rate"]["steady_messages_per_s"],
            "startup_s": round(s["wall_s"] - s["ingest_s"], 2), "peak_rss_mb": usage.peak_rss_mb, "cpu_s": usage.cpu_s}  # fmt: skip


def run_scaling(out_root: Path, data_dir: Path, sizes: list[int] = SIZES, partitions: list[int] = PARTITIONS) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = out_root / f"scaling-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    mid = sizes[len(sizes) // 2]
    by_partitions, by_size = [], []
    with tempfile.TemporaryDirectory(prefix="kappa-scaling-") as tmp:
        cluster = local_kafka.start(Path(tmp) / "kafka", heap="1g")
        try:
            admin = Admin(cluster.bootstrap_servers)
            for n in sizes:
                data = data_dir / f"wide30-{n}.csv"
                if not data.exists():
                    datagen.generate("wide30", n, data)
            for p in partitions:
                admin.ensure_topic(f"scale-p{p}", 4, 1)
                by_partitions.append(_run(cluster.bootstrap_servers, Path(tmp), data_dir / f"wide30-{mid}.csv", p,
                                          f"scale-p{p}"))  # fmt: skip
                print(f"  {mid:>10,} rows, {p} partitions: {by_partitions[-1]['rows_per_s']:>9,.0f} rows/s", flush=True)
            for n in sizes:
                admin.ensure_topic(f"scale-n{n}", 4, 1)
                by_size.append(
                    _run(cluster.bootstrap_servers, Path(tmp), data_dir / f"wide30-{n}.csv", 2, f"scale-n{n}")
                )
                print(f"  {n:>10,} rows, 2 partitions: {by_size[-1]['rows_per_s']:>9,.0f} rows/s, "
                      f"peak {by_size[-1]['peak_rss_mb']:,.0f} MB", flush=True)  # fmt: skip
            admin.close()
        finally:
            cluster.stop()
    # Start-up excluded: the broker-side steady rate (median of the middle 80% of the sending
    # seconds), not rows over the first task's launch to the last task's end.
    rates = [r["steady_rows_per_s"] for r in by_size]
    mem = {r["rows"]: r["peak_rss_mb"] for r in by_size}
    checks = {
        "steady_rows_per_s_spread_across_sizes": round(max(rates) / min(rates) - 1, 3),
        "linear_within_15pct": max(rates) / min(rates) - 1 <= 0.15,
        "peak_rss_largest_vs_middle": round(mem[sizes[-1]] / mem[mid] - 1, 3),
        "memory_flat_within_20pct": mem[sizes[-1]] <= mem[mid] * 1.2,
    }
    result = {"started_at": stamp, "by_partitions": by_partitions, "by_size": by_size, "checks": checks}
    (out / "scaling.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "scaling.png").write_bytes(plots.png(plots.scaling(result)))
    print(json.dumps(checks, indent=2))
    print(f"results: {out}")
    return out
