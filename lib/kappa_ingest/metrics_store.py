"""The Delta metrics store: every run (and every `make bench` run) appended to Delta tables
under ``<metrics-dir>/delta/``, keyed by ``run_id``, for notebooks and ``kappa-ingest report``.

Each table has the explicit schema below, created once with
``DeltaTable.createIfNotExists``; then rows are appended. Failed runs are recorded too,
with their status and error.

| table | one row per | columns |
| --- | --- | --- |
| runs | run | see RUNS |
| tasks | task attempt of the sending stage(s) | see TASKS |
| executors | executor | see EXECUTORS |
| stages | stage attempt | see STAGES |
| broker_rate | one-second broker sample | see BROKER_RATE |
| bench | contestant run of `make bench` | see BENCH |
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

S, L, D, INT, TS, B = T.StringType(), T.LongType(), T.DoubleType(), T.IntegerType(), T.TimestampType(), T.BooleanType()


def _schema(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(name, kind, nullable=name != "run_id") for name, kind in fields])


RUNS = _schema(
    ("run_id", S), ("status", S), ("error", S), ("sink", S), ("topic", S), ("bootstrap_servers", S),
    ("spark_master", S), ("read_path", S), ("dry_run", B), ("started_at", TS), ("finished_at", TS), ("wall_s", D),
    ("ingest_s", D), ("rows_read", L), ("rows_sent", L), ("rows_quarantined", L), ("bytes_sent", L),
    ("rows_per_s", D), ("mb_per_s", D), ("peak_messages_per_s", D), ("steady_messages_per_s", D),
    ("time_to_first_record_s", D), ("retry_duplicates", L), ("checks_ok", B), ("settings", S), ("config_json", S),
)  # fmt: skip
TASKS = _schema(
    ("run_id", S), ("task_id", L), ("stage_id", INT), ("partition", INT), ("attempt", INT), ("status", S),
    ("executor_id", S), ("host", S), ("launched_at", TS), ("duration_s", D), ("rows", L), ("bytes", L),
    ("rows_quarantined", L), ("rows_per_s", D),
)  # fmt: skip
EXECUTORS = _schema(
    ("run_id", S), ("executor_id", S), ("host", S), ("tasks", INT), ("rows", L), ("bytes", L), ("busy_s", D),
    ("span_s", D), ("rows_per_s", D), ("mb_per_s", D),
)  # fmt: skip
STAGES = _schema(
    ("run_id", S), ("stage_id", INT), ("attempt", INT), ("name", S), ("status", S), ("num_tasks", INT),
    ("submitted_at", TS), ("completed_at", TS), ("duration_s", D), ("executor_run_s", D), ("executor_cpu_s", D),
    ("input_bytes", L), ("input_records", L), ("sends", B),
)  # fmt: skip
BROKER_RATE = _schema(("run_id", S), ("t", TS), ("offsets_total", L), ("messages_per_s", D), ("one_minute_rate", D))
BENCH = _schema(
    ("run_id", S), ("layout", S), ("contestant", S), ("kind", S), ("repeat", INT), ("rows", L), ("broker_rows", L),
    ("ingest_s", D), ("startup_s", D), ("wall_s", D), ("rows_per_s", D), ("mb_per_s", D), ("record_bytes", D),
    ("cpu_s", D), ("broker_cpu_s", D), ("peak_rss_mb", D),
)  # fmt: skip
TABLES = {"runs": RUNS, "tasks": TASKS, "executors": EXECUTORS, "stages": STAGES, "broker_rate": BROKER_RATE,
          "bench": BENCH}  # fmt: skip


def table_path(metrics_dir: str | Path, name: str) -> str:
    return str(Path(metrics_dir).resolve() / "delta" / name)


def ensure_tables(spark: SparkSession, metrics_dir: str | Path) -> None:
    """Create every table with its schema if absent."""
    from delta.tables import DeltaTable

    for name, schema in TABLES.items():
        DeltaTable.createIfNotExists(spark).location(table_path(metrics_dir, name)).addColumns(schema).execute()


def _ts(v: Any) -> datetime | None:
    return datetime.fromisoformat(v.replace("Z", "+00:00")) if isinstance(v, str) else v


def _row(schema: T.StructType, values: dict[str, Any]) -> tuple:
    out = []
    for f in schema.fields:
        v = values.get(f.name)
        if isinstance(f.dataType, T.TimestampType):
            v = _ts(v)
        elif isinstance(f.dataType, T.DoubleType) and v is not None:
            v = float(v)
        elif isinstance(f.dataType, (T.LongType, T.IntegerType)) and v is not None:
            v = int(v)
        out.append(v)
    return tuple(out)


def run_rows(summary: dict[str, Any]) -> dict[str, list[tuple]]:
    """A run's summary.json as rows of each table (pure)."""
    rid = summary["run_id"]
    rate = (summary.get("broker") or {}).get("rate") or {}
    settings = " ".join(f"{k}={v}" for k, v in sorted((summary.get("config") or {}).get("kafka_opts", {}).items()))
    run = {**summary, **rate, "retry_duplicates": (summary.get("duplicates") or {}).get("count", 0),
           "checks_ok": all(c["ok"] for c in summary.get("checks", [])), "settings": settings,
           "config_json": json.dumps(summary.get("config"), default=str)}  # fmt: skip
    return {
        "runs": [_row(RUNS, run)],
        "tasks": [_row(TASKS, {**t, "run_id": rid}) for t in summary.get("tasks", [])],
        "executors": [_row(EXECUTORS, {**e, "run_id": rid}) for e in summary.get("executors", [])],
        "stages": [_row(STAGES, {**s, "run_id": rid}) for s in summary.get("stages", [])],
        "broker_rate": [_row(BROKER_RATE, {**p, "run_id": rid}) for p in summary.get("broker_rate", [])],
    }


def append(spark: SparkSession, metrics_dir: str | Path, rows: dict[str, list[tuple]]) -> None:
    """Append rows to their tables (created first if absent)."""
    ensure_tables(spark, metrics_dir)
    for name, values in rows.items():
        if values:
            df = spark.createDataFrame(values, TABLES[name])
            df.write.format("delta").mode("append").save(table_path(metrics_dir, name))


def record_run(spark: SparkSession, metrics_dir: str | Path, summary: dict[str, Any]) -> None:
    append(spark, metrics_dir, run_rows(summary))


def record_bench(spark: SparkSession, metrics_dir: str | Path, bench_id: str, runs: list[dict[str, Any]]) -> None:
    append(spark, metrics_dir, {"bench": [_row(BENCH, {**r, "run_id": bench_id}) for r in runs]})


def read(spark: SparkSession, metrics_dir: str | Path, name: str) -> DataFrame:
    return spark.read.format("delta").load(table_path(metrics_dir, name))
