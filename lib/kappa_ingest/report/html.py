"""``kappa-ingest report --run-id ID --html FILE``: one run as a self-contained page (figures
embedded as PNG, no script, nothing fetched) for people without Jupyter.

The first screen answers the three questions people open it with: how fast was it (end to
end, and the sending rate), where did the time go (the phases, the broker's curve and the
tasks on the run's own clock), and was every row delivered (rows and checks). Tables below
hold the detail, with human labels and units, and fit a laptop window.
"""

from __future__ import annotations

import base64
import html
from typing import Any

from kappa_ingest.report.phases import COLOURS, LABELS, PHASES
from kappa_ingest.report.run import MB, render_phases, stage_label
from kappa_ingest.report.text import checks, checks_verdict, number, when
from kappa_ingest.report.watch_view import WatchView

Row = dict[str, Any]

CSS = """
*, *::before, *::after { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1a202c; background: #fff; }
main { max-width: 1280px; margin: 0 auto; padding: 12px 20px 40px; }
h1 { font-size: 20px; margin: 4px 0; } h2 { font-size: 16px; margin: 22px 0 6px; }
.status { display: inline-block; padding: 1px 10px; border-radius: 4px; color: #fff; font-size: 14px;
  vertical-align: 2px; }
.succeeded { background: #2f855a; } .failed, .interrupted { background: #c53030; } .other { background: #718096; }
.context { color: #4a5568; margin: 0 0 10px; overflow-wrap: anywhere; }
.error { color: #c53030; font-weight: 600; overflow-wrap: anywhere; }
.tiles { display: grid; grid-template-columns: repeat(4, 1fr); gap: 10px; margin: 8px 0; }
.tile { border: 1px solid #e2e8f0; border-radius: 6px; padding: 8px 12px; background: #f7fafc; min-width: 0; }
.tile .label { color: #4a5568; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.tile .value { font-size: 24px; font-weight: 600; }
.tile .note { color: #4a5568; font-size: 12px; overflow-wrap: anywhere; }
.tile.bad { border-color: #c53030; background: #fff5f5; }
.phases { display: flex; height: 26px; border-radius: 4px; overflow: hidden; margin: 6px 0 2px; font-size: 12px; }
.phases div { display: flex; align-items: center; justify-content: center; white-space: nowrap; overflow: hidden;
  min-width: 2px; }
.phase-legend { color: #4a5568; font-size: 12px; margin-bottom: 8px; }
.figures { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
figure { margin: 0; min-width: 0; } img { max-width: 100%; height: auto; display: block; }
figcaption { color: #4a5568; font-size: 12px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
td, th { border-bottom: 1px solid #e2e8f0; padding: 3px 8px; text-align: right; white-space: nowrap;
  font-variant-numeric: tabular-nums; }
th { background: #edf2f7; font-weight: 600; vertical-align: bottom; }
td.text, th.text { text-align: left; white-space: normal; overflow-wrap: anywhere; }
.details { display: grid; grid-template-columns: repeat(3, 1fr); gap: 0 24px; }
.details div { display: flex; justify-content: space-between; gap: 12px; border-bottom: 1px solid #edf2f7;
  padding: 2px 0; min-width: 0; }
.details span:last-child { text-align: right; overflow-wrap: anywhere; font-variant-numeric: tabular-nums; }
.ok, .notok { text-align: left; } .ok { color: #2f855a; } .notok { color: #c53030; font-weight: 600; }
"""


def _esc(v: Any) -> str:
    return html.escape("-" if v is None else str(v))


def _num(v: Any, digits: int = 2) -> str:
    return number(v, digits, whole_from=100)


def _table(rows: list[Row], columns: list[tuple[str, str]], text: set[str] = frozenset()) -> str:
    """``columns``: (heading with its unit, key); ``text`` columns are left-aligned."""
    if not rows:
        return '<p class="context">none: no sending stage ran</p>'
    head = "".join(f'<th class="{"text" if k in text else ""}">{html.escape(h)}</th>' for h, k in columns)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"text" if k in text else ""}">{html.escape(_num(r.get(k)))}</td>' for _, k in columns)
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(png: bytes, alt: str, caption: str) -> str:
    data = base64.b64encode(png).decode()
    return (
        f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _tile(label: str, value: str, note: str, bad: bool = False) -> str:
    return (
        f'<div class="tile{" bad" if bad else ""}"><div class="label">{html.escape(label)}</div>'
        f'<div class="value">{html.escape(value)}</div><div class="note">{html.escape(note)}</div></div>'
    )


def headline(r: Row) -> str:
    """Rows, end-to-end time, sending rate and checks: what the first glance is for."""
    lost = (r.get("rows_read") or 0) - (r.get("rows_sent") or 0) - (r.get("rows_quarantined") or 0)
    rows_note = f"of {_num(r.get('rows_read'))} read; {_num(r.get('rows_quarantined'))} quarantined"
    checks_value, _, checks_bad = checks_verdict(r)
    sending_note = (
        f"{_num(r.get('mb_per_s'), 1)} MB/s over the {_num(r.get('ingest_s'), 1)} s sending stage"
        if r.get("ingest_s")
        else "no sending stage ran"
    )
    delivery = f"delivery {r['delivery_mode']}" if r.get("delivery_mode") else "no delivery recorded"
    return (
        '<div class="tiles">'
        + "".join(
            [
                _tile(
                    "rows delivered",
                    _num(r.get("rows_sent")),
                    rows_note,
                    bad=lost != 0 or r.get("status") != "succeeded",
                ),
                _tile("end to end", f"{_num(r.get('wall_s'), 1)} s", "from the command's start to its exit"),
                _tile(
                    "sending rate",
                    f"{_num(r.get('rows_per_s'))} rows/s" if r.get("ingest_s") else "-",
                    sending_note,
                ),
                _tile("checks", checks_value, delivery, bad=checks_bad),
            ]
        )
        + "</div>"
    )


def phase_bar(r: Row) -> str:
    """Where the command's time went, as one bar with the phases' widths to scale."""
    wall = r.get("wall_s") or 0.0
    parts = [(p, r.get(f"{p}_s")) for p in PHASES]
    if not wall or any(v is None for _, v in parts):
        return ""
    cells = "".join(
        f'<div style="width:{100 * v / wall:.2f}%;background:{COLOURS[p]}" title="{LABELS[p]} {v:.2f} s">'
        + (f"{LABELS[p]} {v:.1f} s" if v / wall >= 0.09 else "")
        + "</div>"
        for p, v in parts
        if v > 0
    )
    legend = render_phases({f"{p}_s": v for p, v in parts}, wall)
    return (
        f'<div class="phases" role="img" aria-label="phases">{cells}</div>'
        f'<div class="phase-legend">{html.escape(legend)}</div>'
    )


def _details(r: Row) -> str:
    items = [
        ("sink", r.get("sink")), ("topic", r.get("topic")), ("bootstrap servers", r.get("bootstrap_servers")),
        ("Spark master", r.get("spark_master")), ("read path", r.get("read_path")),
        ("started (UTC)", when(r.get("started_at"))),
        ("rows read", r.get("rows_read")), ("rows sent", r.get("rows_sent")),
        ("rows quarantined", r.get("rows_quarantined")),
        ("MB sent", None if r.get("bytes_sent") is None else r["bytes_sent"] / MB),
        ("sending stage, s", r.get("ingest_s")), ("end to end, s", r.get("wall_s")),
        ("rows/s (sending)", r.get("rows_per_s")), ("MB/s (sending)", r.get("mb_per_s")),
        ("broker peak, msg/s", r.get("peak_messages_per_s")), ("broker steady, msg/s", r.get("steady_messages_per_s")),
        ("first record after, s", r.get("time_to_first_record_s")), ("retry duplicates", r.get("retry_duplicates")),
        ("delivery", r.get("delivery_mode")), ("transactions committed", r.get("transactions_committed")),
        ("transactions aborted", r.get("transactions_aborted")), ("resumed from", r.get("resumed_from")),
    ]  # fmt: skip
    cells = "".join(f"<div><span>{html.escape(k)}</span><span>{_esc(_num(v))}</span></div>" for k, v in items)
    return f'<div class="details">{cells}</div>'


def _checks_table(r: Row) -> str:
    rows = checks(r)
    if not rows:
        return ""
    body = "".join(
        f'<tr><td class="{"ok" if c["ok"] else "notok"}">{"holds" if c["ok"] else "FAILED"}</td>'
        f'<td class="text">{_esc(c["name"])}</td><td>{_esc(_num(c["expected"]))}</td>'
        f"<td>{_esc(_num(c['actual']))}</td></tr>"
        for c in rows
    )
    return (
        '<h2>Checks: how the counts reconcile</h2><table><thead><tr><th style="text-align: left">result</th><th class=text>check</th><th>expected</th>'
        f"<th>actual</th></tr></thead><tbody>{body}</tbody></table>"
    )


def _quality(run: dict[str, list[Row]]) -> str:
    q = run.get("quality") or []
    if not q:
        return ""
    rows = [{**e, "result": "passed" if e["success"] else "FAILED"} for e in q]
    return f"<h2>Data quality: suite {_esc(q[0]['suite'])}, gate {_esc(q[0]['gate'])}</h2>" + _table(
        rows,
        [("#", "index"), ("expectation", "type"), ("column", "column"), ("result", "result"),
         ("observed", "observed"), ("unexpected rows", "unexpected_count"), ("rows checked", "element_count"),
         ("quarantines", "quarantines")],
        text={"type", "column", "result", "observed"},
    )  # fmt: skip


def figures(run: dict[str, list[Row]]) -> list[str]:
    """The run's figures, as <figure> elements, first the two that say where the time went."""
    from kappa_ingest.report import plots  # matplotlib: 0.4 s to import, needed for the page only

    out = []
    if run["broker_rate"]:
        out.append(_img(plots.png(plots.broker_curve(run)), "broker-side rate",
                        "Messages arriving at the broker each second; the band on top: the run's phases."))  # fmt: skip
    if run["tasks"]:
        out.append(_img(plots.png(plots.task_timeline(run)), "task timeline",
                        "Each sending task on its executor slot; hatched: a failed attempt."))  # fmt: skip
    if run["executors"]:
        out.append(_img(plots.png(plots.executor_rates(run)), "per-executor rows/s",
                        "Bars: each executor's rows over its span; dots on a line: its tasks' own rows/s, min to max."))  # fmt: skip
    return out


# Long: the page top to bottom, as a reader meets it.
def render_html(run: dict[str, list[Row]]) -> str:
    """One run (as ``metrics_store.run`` returns it) as a self-contained page (pure)."""
    r = run["runs"][0]
    sink = r.get("sink") or "?"
    status = str(r.get("status"))
    badge = status if status in ("succeeded", "failed", "interrupted") else "other"
    context = (
        f"sink <b>{_esc(sink)}</b> → topic <b>{_esc(r.get('topic'))}</b> at {_esc(r.get('bootstrap_servers'))}; "
        f"Spark {_esc(r.get('spark_master'))}"
        + (f"; started {when(r['started_at'])} UTC" if r.get("started_at") else "")
    )
    error = f'<p class="error">error: {_esc(r["error"])}</p>' if r.get("error") else ""
    stages = [{**s, "what": stage_label(s, sink), "stage": f"{s['stage_id']}" + (f" (attempt {s['attempt'] + 1})" if s.get("attempt") else ""),
               "input_mb": (s.get("input_bytes") or 0) / MB} for s in run["stages"]]  # fmt: skip
    executors = [{**e, "mb": (e.get("bytes") or 0) / MB} for e in run["executors"]]
    failed_checks = "".join(
        f'<p class="error">check failed: {_esc(c["name"])}: expected {_esc(c["expected"])}, got {_esc(c["actual"])}</p>'
        for c in checks(r)
        if not c["ok"]
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>kappa-ingest run {_esc(r["run_id"])}: {_esc(status)}</title>
<style>{CSS}</style></head><body><main>
<h1>kappa-ingest run {_esc(r["run_id"])} <span class="status {badge}">{_esc(status.upper())}</span></h1>
<p class="context">{context}</p>
{error}
{headline(r)}
{failed_checks}
{phase_bar(r)}
<div class="figures">{"".join(figures(run))}<div>{_checks_table(r)}</div></div>
<h2>Run</h2>
{_details(r)}
{_quality(run)}
<h2>Executors</h2>
{
        _table(
            executors,
            [
                ("executor", "executor_id"),
                ("host", "host"),
                ("tasks", "tasks"),
                ("rows", "rows"),
                ("MB", "mb"),
                ("busy, s", "busy_s"),
                ("span, s", "span_s"),
                ("rows/s", "rows_per_s"),
                ("MB/s", "mb_per_s"),
                ("record loops", "record_loops"),
                ("warnings", "warnings"),
            ],
            text={"executor_id", "host", "record_loops", "warnings"},
        )
    }
<h2>Stages</h2>
{
        _table(
            stages,
            [
                ("stage", "stage"),
                ("what it did", "what"),
                ("tasks", "num_tasks"),
                ("duration, s", "duration_s"),
                ("executor run, s", "executor_run_s"),
                ("executor JVM CPU, s", "executor_cpu_s"),
                ("input MB", "input_mb"),
                ("input rows", "input_records"),
                ("status", "status"),
            ],
            text={"stage", "what", "status"},
        )
    }
<h2>Producer settings</h2>
<p class="context">{_esc(r.get("settings") or "Kafka's defaults")}</p>
</main></body></html>
"""


def render_watch_html(watch: WatchView) -> str:
    """A watch (``metrics_store.watch``) as a self-contained page: how many files and rows,
    how fast each file got in, the timeline of its batches, then every batch (pure)."""
    from kappa_ingest.report import plots

    p50, p99 = watch.latency(0.5), watch.latency(0.99)
    tiles = "".join([
        _tile("files sent", _num(len(watch.files)), f"{_num(watch.rows)} rows"),
        _tile("latency p50", "-" if p50 is None else f"{p50:.1f} s", "from landing to commit, per file"),
        _tile("latency p99", "-" if p99 is None else f"{p99:.1f} s", f"the slowest {_num(watch.latency(1.0))} s"),
        _tile("batches", _num(len(watch.batches)), f"{watch.failed} failed or stopped; at most "
              f"{watch.most_waiting} file(s) waiting", bad=watch.failed > 0),
    ])  # fmt: skip
    figure = _img(plots.png(plots.watch_timeline(watch)), "watch timeline",
                  "Bars: batches as long as they ran; dots: each file's latency at its commit; below: files waiting.")  # fmt: skip
    batches = [{**vars(b), "batch": b.run_id, "started": when(b.started_at)} for b in reversed(watch.batches)]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>kappa-ingest watch {_esc(watch.watch_id)}</title>
<style>{CSS}</style></head><body><main>
<h1>kappa-ingest watch {_esc(watch.watch_id)}</h1>
<p class="context">sink <b>{_esc(watch.sink)}</b> → topic <b>{_esc(watch.topic)}</b>; first batch {
        when(watch.started_at)
    } UTC,
{_num(watch.span_s, 1)} s to the end of the last</p>
<div class="tiles">{tiles}</div>
{figure}
<h2>Batches, newest first</h2>
{
        _table(
            batches,
            [
                ("batch (a run: report --run-id)", "batch"),
                ("started (UTC)", "started"),
                ("status", "status"),
                ("files", "files"),
                ("rows", "rows"),
                ("s", "wall_s"),
                ("latency max, s", "latency_max_s"),
                ("files waiting at its start", "waiting"),
            ],
            text={"batch", "started", "status"},
        )
    }
</main></body></html>
"""
