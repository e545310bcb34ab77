"""The Hesse-style sweep (``make sweep``, ``kappa-ingest bench --sweep``): the producer
settings of the seed papers' experiment matrix, and configured against achieved input rate.

- matrix: ``acks`` ∈ {0, 1, all} × ``batch.size`` ∈ {16384, 32768, 65536} ×
  ``compression.type`` ∈ {none, lz4, zstd} × topic partitions ∈ {1, 4}; per cell the run's
  rows/s and MB/s and whether the broker-side per-second rate was steady;
- rate mode: ``--target-rate`` at several rates and unthrottled, achieved rate measured at
  the broker (the steady per-second rate), over runs of about 30 seconds.

All runs share one Spark session and one local broker; each writes a fresh topic.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from kappa_ingest import config, datagen
from kappa_ingest.errors import KappaError
from kappa_ingest.ingest import ingest
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.report import plots
from kappa_ingest.spark.session import build_session

ACKS = ["0", "1", "all"]
BATCH_SIZES = [16384, 32768, 65536]
COMPRESSION = ["none", "lz4", "zstd"]
TOPIC_PARTITIONS = [1, 4]
TARGET_RATES: list[float | None] = [20_000, 50_000, 100_000, 250_000, None]
RATE_RUN_S = 30
STEADY_SPREAD = 0.15  # a run is steady when its per-second rates vary less than this (CV)


def _cell(spark, bootstrap: str, work: Path, data: Path, topic: str, partitions: int, opts: dict[str, str],
          target_rate: float | None = None) -> dict[str, Any]:  # fmt: skip
    cfg = config.validate(
        {
            "inputs": [str(data)],
            "topic": topic,
            "bootstrap_servers": bootstrap,
            "partitions": 2,
            "topic_partitions": partitions,
            "kafka_opts": opts,
            "metrics_dir": str(work / "metrics"),
            "target_rate": target_rate,
        }
    )
    try:
        report = ingest(cfg, spark, echo=False).summary()
    except KappaError as e:  # e.g. acks=0 losing records: a result of the sweep, not its end
        report = json.loads((work / "metrics" / "runs" / cfg.run_id / "summary.json").read_text())
        report["error"] = str(e)
    rate = report["broker"].get("rate") or {"steady_messages_per_s": 0, "peak_messages_per_s": 0, "steady_spread": None}
    return {
        "rows": report["rows_sent"],
        "rows_per_s": report["rows_per_s"],
        "mb_per_s": report["mb_per_s"],
        "broker_steady_per_s": rate["steady_messages_per_s"],
        "broker_peak_per_s": rate["peak_messages_per_s"],
        "spread": rate["steady_spread"],
        "steady": rate["steady_spread"] is not None and rate["steady_spread"] < STEADY_SPREAD,
        "run_id": report["run_id"],
        "broker_rows": report["broker"].get("offset_delta"),
        "error": report.get("error"),
    }


def run_sweep(
    rows: int,
    out_root: Path,
    data_dir: Path,
    quick: bool = False,
    spark: SparkSession | None = None,
    cluster: local_kafka.LocalKafka | None = None,
) -> Path:
    """The matrix and the rate mode; writes ``sweep.json``, ``sweep.md``, ``heatmap.png``,
    ``configured_vs_achieved.png``. A session or broker given is used and left running (a
    notebook's, the test suite's); else the sweep starts its own and stops it."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = out_root / f"sweep-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    data = data_dir / f"wide30-{rows}.csv"
    if not data.exists():
        datagen.generate("wide30", rows, data)
    matrix = list(itertools.product(ACKS, BATCH_SIZES, COMPRESSION, TOPIC_PARTITIONS))
    rates = TARGET_RATES
    if quick:  # for the test suite: a corner of each
        matrix, rates = matrix[:2], [TARGET_RATES[0], None]
    cells: list[dict[str, Any]] = []
    rate_runs: list[dict[str, Any]] = []
    own_spark, own_cluster = spark is None, cluster is None
    spark = spark or build_session("kappa-ingest sweep", "local[2]")
    with tempfile.TemporaryDirectory(prefix="kappa-sweep-") as tmp:
        work = Path(tmp)
        cluster = cluster or local_kafka.start(work / "kafka", heap="1g")
        try:
            for i, (acks, batch, comp, parts) in enumerate(matrix):
                opts = {"acks": acks, "batch.size": str(batch), "compression.type": comp, "linger.ms": "5",
                        "enable.idempotence": "true" if acks == "all" else "false"}  # fmt: skip
                cell = _cell(spark, cluster.bootstrap_servers, work, data, f"sweep-{stamp}-{i}", parts, opts)
                cells.append(
                    {"acks": acks, "batch_size": batch, "compression": comp, "topic_partitions": parts, **cell}
                )
                print(f"  acks={acks:3} batch={batch:6} {comp:5} partitions={parts}: {cell['rows_per_s']:>9,.0f} rows/s"
                      f"{'' if cell['steady'] else '  (unsteady)'}", flush=True)  # fmt: skip
            best = max(cells, key=lambda c: c["rows_per_s"])
            best_opts = {"acks": best["acks"], "batch.size": str(best["batch_size"]),
                         "compression.type": best["compression"], "linger.ms": "5",
                         "enable.idempotence": "true" if best["acks"] == "all" else "false"}  # fmt: skip
            for j, target in enumerate(rates):
                n = int(target * RATE_RUN_S) if target and target * RATE_RUN_S < rows else rows
                path = data if n == rows else data_dir / f"wide30-{n}.csv"
                if not path.exists():
                    datagen.generate("wide30", n, path)
                cell = _cell(spark, cluster.bootstrap_servers, work, path, f"sweep-{stamp}-rate-{j}",
                             best["topic_partitions"], best_opts, target)  # fmt: skip
                achieved = cell["broker_steady_per_s"]
                rate_runs.append({"configured": target, "achieved": achieved, **cell,
                                  "error": round(achieved / target - 1, 4) if target else None})  # fmt: skip
                print(f"  target {target or 'unthrottled'}: achieved {achieved:,.0f} msg/s at the broker", flush=True)
        finally:
            if own_cluster:
                cluster.stop()
            if own_spark:
                spark.stop()
    result = {"rows": rows, "started_at": stamp, "cells": cells, "rates": rate_runs, "recommended": recommend(cells)}
    (out / "sweep.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "sweep.md").write_text(sweep_markdown(result))
    (out / "heatmap.png").write_bytes(plots.png(plots.sweep_heatmap(cells)))
    (out / "configured_vs_achieved.png").write_bytes(plots.png(plots.configured_vs_achieved(rate_runs)))
    print(sweep_markdown(result))
    print(f"results: {out}")
    return out


def recommend(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest steady cell with acks=all (durable), and the fastest overall."""
    durable = [c for c in cells if c["acks"] == "all" and c["steady"]] or [c for c in cells if c["acks"] == "all"]
    pick = max(durable or cells, key=lambda c: c["rows_per_s"])
    fastest = max(cells, key=lambda c: c["rows_per_s"])
    keys = ("acks", "batch_size", "compression", "topic_partitions", "rows_per_s")
    return {"durable": {k: pick[k] for k in keys}, "fastest": {k: fastest[k] for k in keys}}


def sweep_markdown(result: dict[str, Any]) -> str:
    lines = [f"Sweep of {result['rows']:,} wide30 rows, {result['started_at']}", "",
             "| acks | batch.size | compression | topic partitions | rows/s | MB/s | broker steady msg/s | spread | steady "
             "| at the broker |", "|" + " --- |" * 10]  # fmt: skip
    for c in result["cells"]:
        lines.append(f"| {c['acks']} | {c['batch_size']} | {c['compression']} | {c['topic_partitions']} | "
                     f"{c['rows_per_s']:,.0f} | {c['mb_per_s']:.1f} | {c['broker_steady_per_s']:,.0f} | "
                     f"{c['spread']} | {'yes' if c['steady'] else 'no'} | "
                     f"{'all' if c['broker_rows'] == c['rows'] else c['broker_rows']} |")  # fmt: skip
    lines += ["", "| configured rows/s | achieved at the broker | error |", "| --- | --- | --- |"]
    for r in result["rates"]:
        err = f"{r['error']:+.1%}" if r["error"] is not None else "-"
        lines.append(f"| {r['configured'] or 'unthrottled'} | {r['achieved']:,.0f} | {err} |")
    worst = steady_rate_error(result["rates"])
    if worst is not None:
        lines += ["", f"Throttle accuracy: worst error {worst:.1%} among the reachable configured rates."]
    rec = result["recommended"]
    lines += ["", f"Recommended (durable, acks=all): {rec['durable']}", f"Fastest overall: {rec['fastest']}"]
    return "\n".join(lines) + "\n"


def steady_rate_error(runs: list[dict[str, Any]]) -> float | None:
    """The worst relative error among throttled runs that the machine could reach."""
    errors = [abs(r["error"]) for r in runs if r["configured"] and r["achieved"] > 0 and r["error"] is not None
              and r["configured"] <= max(x["achieved"] for x in runs if not x["configured"])]  # fmt: skip
    return max(errors) if errors else None
