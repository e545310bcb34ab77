"""``kappa-ingest report``: past runs from the Delta metrics store, as text or as one
self-contained HTML page (figures embedded as PNG) for people without Jupyter."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from kappa_ingest import metrics_store
from kappa_ingest.errors import UsageError

RUN_COLUMNS = ["run_id", "status", "sink", "topic", "rows_sent", "rows_quarantined", "rows_per_s", "mb_per_s",
               "steady_messages_per_s", "ingest_s", "wall_s", "started_at"]  # fmt: skip


def load_run(metrics_dir: str | Path, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows of one run, as dicts (read without Spark)."""
    order = {
        "tasks": "task_id",
        "stages": "stage_id",
        "broker_rate": "t",
        "executors": "executor_id",
        "quality": "index",
    }
    out = {
        name: metrics_store.rows(metrics_dir, name, run_id, order.get(name))
        if metrics_store.exists(metrics_dir, name)  # a store older than the table
        else []
        for name in metrics_store.RUN_TABLES
    }
    if not out["runs"]:
        raise UsageError(f"--run-id {run_id}: no such run in {metrics_dir}/delta; see 'kappa-ingest report --last 20'")
    return out


def last_runs(metrics_dir: str | Path, n: int) -> list[dict[str, Any]]:
    """The ``n`` most recently started runs, newest first."""
    runs = metrics_store.read(metrics_dir, "runs").sort_by([("started_at", "descending")])
    return runs.slice(0, n).to_pylist()


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "-" if v is None else str(v)


def text_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [columns] + [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells)


def _html_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(png: bytes, alt: str) -> str:
    return (
        f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"></figure>'
    )


def render_html(run: dict[str, list[dict[str, Any]]]) -> str:
    """One run as a self-contained page: totals, figures, executors and stages (pure)."""
    from kappa_ingest import plots  # matplotlib: 0.4 s to import, needed for the page only

    r = run["runs"][0]
    figures = []
    if run["executors"]:
        figures.append(_img(plots.png(plots.executor_rates(run["executors"])), "per-executor rows/s"))
    if run["tasks"]:
        figures.append(_img(plots.png(plots.task_timeline(run["tasks"])), "task timeline"))
    if run["broker_rate"]:
        figures.append(_img(plots.png(plots.broker_curve(run["broker_rate"])), "broker-side rate"))
    error = f"<p class=error>{html.escape(r['error'])}</p>" if r.get("error") else ""
    quality = ""
    if run.get("quality"):
        q = run["quality"]
        quality = (f"<h2>Data quality: suite {html.escape(str(q[0]['suite']))}, gate {html.escape(str(q[0]['gate']))}</h2>"
                   + _html_table(q, ["index", "type", "column", "success", "observed", "unexpected_count",
                                     "element_count", "quarantines"]))  # fmt: skip
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kappa-ingest run {html.escape(r["run_id"])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
td, th {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }}
th {{ background: #f0f4f8; }} figure {{ margin: 1em 0; }} img {{ max-width: 100%; }}
.error {{ color: #b00; font-weight: bold; }}
</style></head><body>
<h1>kappa-ingest run {html.escape(r["run_id"])}: {html.escape(str(r["status"]))}</h1>
<p>sink <b>{html.escape(str(r["sink"]))}</b> → topic <b>{html.escape(str(r["topic"]))}</b> at
{html.escape(str(r["bootstrap_servers"]))}; Spark {html.escape(str(r["spark_master"]))}; read path {
        html.escape(str(r["read_path"]))
    }</p>
{error}
{
        _html_table(
            [r],
            [
                "rows_read",
                "rows_sent",
                "rows_quarantined",
                "bytes_sent",
                "ingest_s",
                "wall_s",
                "rows_per_s",
                "mb_per_s",
                "peak_messages_per_s",
                "steady_messages_per_s",
                "time_to_first_record_s",
            ],
        )
    }
{"".join(figures)}
{quality}
<h2>Executors</h2>
{
        _html_table(
            run["executors"],
            ["executor_id", "host", "tasks", "rows", "bytes", "busy_s", "span_s", "rows_per_s", "mb_per_s"],
        )
    }
<h2>Stages</h2>
{
        _html_table(
            run["stages"],
            [
                "stage_id",
                "attempt",
                "name",
                "num_tasks",
                "duration_s",
                "executor_run_s",
                "executor_cpu_s",
                "input_bytes",
                "input_records",
            ],
        )
    }
<p>settings: {html.escape(str(r.get("settings") or ""))}</p>
</body></html>
"""
