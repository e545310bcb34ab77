"""The Delta metrics store: every run (and every `make bench` run) appended to Delta tables
under ``<metrics-dir>/delta/``, keyed by ``run_id``, for notebooks and ``kappa-ingest report``.

Written and read with ``deltalake`` (delta-rs) from the driver's Python: one commit per
table and run, no Spark job and no JVM, so recording a run takes a fraction of a second
and ``kappa-ingest report`` answers without starting Spark. The tables are ordinary Delta
tables (reader version 1, writer version 2): Spark with delta-spark reads them too
(``build_session(..., extra_conf=SPARK_READER_CONF)``, then
``spark.read.format("delta").load(table_path(...))`` for a local store: this project's
Spark has no S3 filesystem), and the suite checks both readers.

Each table has the explicit schema below; a table is created with it on first use, then
rows are appended. Columns added by a newer version are merged into an older table's
schema on its next append. Failed runs are recorded too, with their status and error.

| table | one row per | columns |
| --- | --- | --- |
| runs | run | see RUNS |
| tasks | task attempt of the sending stage(s) | see TASKS |
| executors | executor | see EXECUTORS |
| stages | stage attempt | see STAGES |
| broker_rate | one-second broker sample | see BROKER_RATE |
| bench | contestant run of `make bench` | see BENCH |
| ledger | unit of input a run delivered (the ledger topic's readable copy) | see LEDGER |
| watch_files | file a watch sent (each of its batches is a run) | see WATCH_FILES |
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pyarrow as pa

from kappa_ingest.errors import UsageError
from kappa_ingest.report.phases import parse_time
from kappa_ingest.report.watch_view import WatchView, newest_first, watch_view
from kappa_ingest.s3.directory import Directory, MetricsDir

# A Spark session that reads the store with delta-spark (its jars are among the session's packages).
SPARK_READER_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # A table's state is rebuilt from its log in this many tasks (Delta's default: 50). The
    # metrics tables' logs are small: one task read the seven tables in 17 s, not 28 s (2 cores).
    "spark.databricks.delta.snapshotPartitions": "1",
}

S, L, D, INT, B = pa.string(), pa.int64(), pa.float64(), pa.int32(), pa.bool_()
TS = pa.timestamp("us", tz="UTC")
PHASES = ("startup_s", "setup_s", "sending_s", "reconcile_s", "recording_s")


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, kind, nullable=name != "run_id") for name, kind in fields])


RUNS = _schema(
    ("run_id", S), ("status", S), ("error", S), ("sink", S), ("topic", S), ("bootstrap_servers", S),
    ("spark_master", S), ("read_path", S), ("dry_run", B), ("started_at", TS), ("finished_at", TS), ("wall_s", D),
    ("ingest_s", D), ("rows_read", L), ("rows_sent", L), ("rows_quarantined", L), ("bytes_sent", L),
    ("rows_per_s", D), ("mb_per_s", D), ("peak_messages_per_s", D), ("steady_messages_per_s", D),
    ("time_to_first_record_s", D), ("retry_duplicates", L), ("checks_ok", B), ("settings", S), ("config_json", S),
    *((p, D) for p in PHASES),
    ("delivery_mode", S), ("transactions_committed", L), ("transactions_aborted", L), ("resumed_from", S),
    ("splits_skipped", L), ("rows_skipped", L), ("checks_held", L), ("checks_total", L), ("checks_json", S),
    ("watch_id", S),
)  # fmt: skip
TASKS = _schema(
    ("run_id", S), ("task_id", L), ("stage_id", INT), ("partition", INT), ("attempt", INT), ("status", S),
    ("executor_id", S), ("host", S), ("launched_at", TS), ("duration_s", D), ("rows", L), ("bytes", L),
    ("rows_quarantined", L), ("rows_per_s", D), ("transaction_s", D), ("stage_attempt", INT),
)  # fmt: skip
EXECUTORS = _schema(
    ("run_id", S), ("executor_id", S), ("host", S), ("tasks", INT), ("rows", L), ("bytes", L), ("busy_s", D),
    ("span_s", D), ("rows_per_s", D), ("mb_per_s", D), ("record_loops", S), ("warnings", S), ("cores", INT),
)  # fmt: skip
STAGES = _schema(
    ("run_id", S), ("stage_id", INT), ("attempt", INT), ("name", S), ("status", S), ("num_tasks", INT),
    ("submitted_at", TS), ("completed_at", TS), ("duration_s", D), ("executor_run_s", D), ("executor_cpu_s", D),
    ("input_bytes", L), ("input_records", L), ("sends", B),
)  # fmt: skip
BROKER_RATE = _schema(("run_id", S), ("t", TS), ("offsets_total", L), ("messages_per_s", D), ("one_minute_rate", D))
BENCH = _schema(
    ("run_id", S), ("layout", S), ("row_set", L), ("contestant", S), ("kind", S), ("repeat", INT), ("rows", L),
    ("broker_rows", L),
    ("ingest_s", D), ("startup_s", D), ("wall_s", D), ("rows_per_s", D), ("mb_per_s", D), ("record_bytes", D),
    ("cpu_s", D), ("broker_cpu_s", D), ("peak_rss_mb", D), ("broker_window_s", D), ("broker_rows_per_s", D),
    ("window_cpu_us_per_row", S), ("window_outside_us_per_row", D), ("window_steal_us_per_row", D), ("phases", S),
)  # fmt: skip
LEDGER = _schema(
    ("run_id", S), ("lineage", S), ("topic", S), ("file", S), ("split_start", L), ("split_length", L), ("part", INT),
    ("parts", INT), ("file_size", L), ("file_mtime_ms", L), ("mode", S), ("lines", L), ("rows_read", L),
    ("rows_sent", L), ("rows_quarantined", L), ("bytes_sent", L), ("task_id", L), ("attempt", INT),
    ("delivered_at", TS), ("status", S), ("file_version", S),
)  # fmt: skip
QUALITY = _schema(
    ("run_id", S), ("suite", S), ("gate", S), ("index", INT), ("type", S), ("column", S), ("kwargs", S),
    ("success", B), ("observed", S), ("unexpected_count", L), ("element_count", L), ("quarantines", B),
)  # fmt: skip
# A watch's files, each once in the topic: which batch (a run of its own) sent it, and its
# latency from landing (found ready by the watch, or modified, the later) to commit.
WATCH_FILES = _schema(
    ("watch_id", S), ("run_id", S), ("file", S), ("bytes", L), ("rows", L), ("landed_at", TS), ("committed_at", TS),
    ("latency_s", D),
)  # fmt: skip
TABLES = {"runs": RUNS, "tasks": TASKS, "executors": EXECUTORS, "stages": STAGES, "broker_rate": BROKER_RATE,
          "bench": BENCH, "ledger": LEDGER, "quality": QUALITY, "watch_files": WATCH_FILES}  # fmt: skip
RUN_TABLES = ("runs", "tasks", "executors", "stages", "broker_rate", "quality")


def table_path(metrics_dir: MetricsDir, name: str) -> str:
    return _table_at(metrics_dir, name)[0]


def _table_at(metrics_dir: MetricsDir, name: str) -> tuple[str, dict[str, str]]:
    """The table's URI and what delta-rs needs to reach it (a store's settings)."""
    return Directory.at(metrics_dir).table("delta", name)


def _value(kind: pa.DataType, v: Any) -> Any:
    if v is None:
        return None
    if pa.types.is_timestamp(kind):
        return parse_time(v)
    if pa.types.is_floating(kind):
        return float(v)
    if pa.types.is_integer(kind):
        return int(v)
    return v


def _table(schema: pa.Schema, rows: list[dict[str, Any]]) -> pa.Table:
    columns = {f.name: [_value(f.type, r.get(f.name)) for r in rows] for f in schema}
    return pa.Table.from_pydict(columns, schema=schema)


def run_rows(summary: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A run's summary.json as rows of each table (pure)."""
    rid = summary["run_id"]
    rate = (summary.get("broker") or {}).get("rate") or {}
    settings = " ".join(f"{k}={v}" for k, v in sorted((summary.get("config") or {}).get("kafka_opts", {}).items()))
    delivery = summary.get("delivery") or {}
    checks = summary.get("checks") or []
    run = {**summary, **rate, **(summary.get("phases") or {}),
           "delivery_mode": delivery.get("mode"),
           **{k: delivery.get(k) for k in ("transactions_committed", "transactions_aborted", "resumed_from",
                                            "splits_skipped", "rows_skipped")},
           "retry_duplicates": (summary.get("duplicates") or {}).get("count", 0),
           "checks_ok": all(c["ok"] for c in checks) if checks else None, "checks_held": sum(c["ok"] for c in checks),
           "checks_total": len(checks), "checks_json": json.dumps(checks, default=str), "settings": settings,
           "config_json": json.dumps(summary.get("config"), default=str),
           "watch_id": (summary.get("config") or {}).get("watch_id")}  # fmt: skip
    return {
        "runs": [run],
        "tasks": [{**t, "run_id": rid} for t in summary.get("tasks", [])],
        "executors": [
            {**e, "run_id": rid, "warnings": "\n".join(e.get("warnings", []))} for e in summary.get("executors", [])
        ],
        "stages": [{**s, "run_id": rid} for s in summary.get("stages", [])],
        "broker_rate": [{**p, "run_id": rid} for p in summary.get("broker_rate", [])],
        "quality": quality_rows(summary),
    }


def quality_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per expectation of the run's suite (none without --expectations)."""
    q = summary.get("quality")
    if not q:
        return []
    return [{**r, "run_id": summary["run_id"], "suite": q["suite"], "gate": q["gate"],
             "column": (r.get("kwargs") or {}).get("column"), "kwargs": json.dumps(r.get("kwargs"), default=str),
             "observed": None if r.get("observed") is None else str(r["observed"])}
            for r in q["expectations"]]  # fmt: skip


def append(metrics_dir: MetricsDir, rows: dict[str, list[dict[str, Any]]]) -> None:
    """Append rows to their tables: one Delta commit per table with rows; a table that does
    not exist yet is created with its full schema, so readers always find every run table."""
    from deltalake import DeltaTable, write_deltalake

    for name, values in rows.items():
        path, options = _table_at(metrics_dir, name)
        if values:
            write_deltalake(path, _table(TABLES[name], values), mode="append", schema_mode="merge",
                            storage_options=options)  # fmt: skip
        elif not DeltaTable.is_deltatable(path, storage_options=options):
            DeltaTable.create(path, TABLES[name], mode="ignore", storage_options=options)


def record_run(metrics_dir: MetricsDir, summary: dict[str, Any]) -> None:
    append(metrics_dir, run_rows(summary))


def ledger_rows(entries: list[Any]) -> list[dict[str, Any]]:
    """Ledger entries (kappa_ingest.delivery.ledger.Entry) as rows of the ``ledger`` table."""
    from datetime import UTC

    rows = []
    for e in entries:
        row = e.row()
        row["delivered_at"] = datetime.fromtimestamp(row.pop("delivered_at_ms") / 1000, UTC)
        rows.append(row)
    return rows


def record_bench(metrics_dir: MetricsDir, bench_id: str, runs: list[dict[str, Any]]) -> None:
    rows = [
        {
            **r,
            "run_id": bench_id,
            "window_cpu_us_per_row": json.dumps(r.get("window_cpu_us_per_row")),
            "phases": json.dumps(r.get("phases")),
        }
        for r in runs
    ]
    append(metrics_dir, {"bench": rows})


def exists(metrics_dir: MetricsDir, name: str = "runs") -> bool:
    from deltalake import DeltaTable

    path, options = _table_at(metrics_dir, name)
    return DeltaTable.is_deltatable(path, storage_options=options)


def read(metrics_dir: MetricsDir, name: str, run_id: str | None = None, *, watch_id: str | None = None) -> pa.Table:
    """One table (or one run's rows of it, or a watch's) as an Arrow table, without Spark."""
    import pyarrow.dataset as ds

    dataset = _dataset(metrics_dir, name)
    key, value = ("watch_id", watch_id) if watch_id is not None else ("run_id", run_id)
    return dataset.to_table(filter=ds.field(key) == value if value is not None else None)


def _dataset(metrics_dir: MetricsDir, name: str) -> Any:
    from deltalake import DeltaTable

    directory = Directory.at(metrics_dir)
    path, options = directory.table("delta", name)
    # Arrow's own filesystem, not delta-rs's Python one: a scan's pre-buffered reads of a
    # Python file are released on Arrow's I/O threads, even after the scan has returned, and
    # one released while the interpreter exits takes the GIL, is ended by Python, and aborts
    # the process (SIGABRT, "terminate called without an active exception"): `report` of a
    # store did so 9 times in 60 with the machine busy.
    return DeltaTable(path, storage_options=options).to_pyarrow_dataset(
        filesystem=directory.arrow_filesystem("delta", name)
    )


def rows(metrics_dir: MetricsDir, name: str, run_id: str | None = None, order_by: str | None = None) -> list[dict]:
    """One table's rows as dicts (timestamps as UTC datetimes), optionally sorted."""
    table = read(metrics_dir, name, run_id)
    if order_by:
        table = table.sort_by(order_by)
    return table.to_pylist()


def run(metrics_dir: MetricsDir, run_id: str, tables: tuple[str, ...] = RUN_TABLES) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows of one run (or those of ``tables``), as dicts (read without Spark)."""
    order = {
        "tasks": "task_id",
        "stages": "stage_id",
        "broker_rate": "t",
        "executors": "executor_id",
        "quality": "index",
    }
    out = {
        name: rows(metrics_dir, name, run_id, order.get(name))
        if exists(metrics_dir, name)  # a store older than the table
        else []
        for name in tables
    }
    if not out["runs"]:
        raise UsageError(f"run {run_id}: no such run in {metrics_dir}/delta; see 'kappa-ingest report --last 20'")
    return out


def last_runs(metrics_dir: MetricsDir, n: int) -> list[dict[str, Any]]:
    """The ``n`` most recently started runs, newest first."""
    runs = read(metrics_dir, "runs").sort_by([("started_at", "descending")])
    return runs.slice(0, n).to_pylist()


def last_entries(metrics_dir: MetricsDir, n: int) -> list[dict[str, Any] | WatchView]:
    """The ``n`` newest runs, newest first, a watch's batches as one entry (its WatchView)."""
    runs = read(metrics_dir, "runs").to_pylist()
    newest = newest_first(runs, n)
    return [watch(metrics_dir, e, runs) if isinstance(e, str) else e for e in newest]


def watch(metrics_dir: MetricsDir, watch_id: str, runs: list[dict[str, Any]] | None = None) -> WatchView | None:
    """The watch ``watch_id``, batch by batch (None: no batch of it in the store)."""
    if runs is None:
        if "watch_id" not in _dataset(metrics_dir, "runs").schema.names:  # a store older than watches
            return None
        runs = read(metrics_dir, "runs", watch_id=watch_id).to_pylist()
    if not any(r.get("watch_id") == watch_id for r in runs):
        return None
    has_files = exists(metrics_dir, "watch_files")
    files = read(metrics_dir, "watch_files", watch_id=watch_id).to_pylist() if has_files else []
    return watch_view(watch_id, runs, files)
