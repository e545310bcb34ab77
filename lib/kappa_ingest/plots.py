"""The figures of a run and of many runs, shared by the notebook and the HTML report.

Each function takes plain rows (a list of dicts, e.g. ``df.toPandas().to_dict("records")``
or a summary.json's lists) and returns a matplotlib Figure; nothing here reads or writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

Rows = Sequence[dict[str, Any]]
BLUE, ORANGE, GREY = "#2b6cb0", "#d98c3a", "#777777"


def _time(v: Any) -> datetime:
    if isinstance(v, datetime):
        return v
    return datetime.fromisoformat(str(v).replace("Z", "+00:00"))


def executor_rates(executors: Rows) -> Figure:
    """Rows/s per executor (over each executor's span)."""
    fig, ax = plt.subplots(figsize=(6, 0.5 * len(executors) + 1.5))
    names = [f"{e['executor_id']} ({e['host']})" for e in executors]
    ax.barh(names, [e["rows_per_s"] for e in executors], color=BLUE)
    for y, e in enumerate(executors):
        ax.text(e["rows_per_s"], y, f" {e['rows_per_s']:,.0f} rows/s, {e['rows']:,} rows", va="center", fontsize=8)
    ax.set_xlabel("rows/s")
    ax.set_title("per-executor ingest rate")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def task_timeline(tasks: Rows) -> Figure:
    """A Gantt chart: one lane per executor, a bar per task attempt, coloured by stage."""
    lanes = sorted({t["executor_id"] for t in tasks})
    stages = sorted({t["stage_id"] for t in tasks})
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(lanes) + 1.8))
    for t in tasks:
        start = mdates.date2num(_time(t["launched_at"]))
        width = t["duration_s"] / 86400
        y = lanes.index(t["executor_id"])
        failed = t.get("status", "SUCCESS") != "SUCCESS"
        ax.broken_barh([(start, width)], (y - 0.35, 0.7), color=colours(stages.index(t["stage_id"]) % 10),
                       edgecolor="red" if failed else "white", hatch="//" if failed else None)  # fmt: skip
        ax.text(start + width / 2, y, f"p{t['partition']}", ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(lanes)), [f"executor {e}" for e in lanes])
    ax.xaxis_date()
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.set_title("task timeline (colour: stage; hatched: failed attempt)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours(i % 10)) for i in range(len(stages))]
    ax.legend(handles, [f"stage {s}" for s in stages], loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def broker_curve(points: Rows, title: str = "broker-side ingest rate") -> Figure:
    """Messages/s each second at the broker, with Kafka's one-minute rate over it (the
    figure of Hesse et al.)."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    t0 = _time(points[0]["t"]) if points else None
    xs = [(_time(p["t"]) - t0).total_seconds() for p in points] if t0 else []
    ax.plot(xs, [p["messages_per_s"] for p in points], color=BLUE, lw=1.2, label="messages/s (1 s samples)")
    ax.plot(xs, [p["one_minute_rate"] for p in points], color=ORANGE, lw=2, label="one-minute rate (MessagesInPerSec)")
    ax.set_xlabel("seconds since the first sample")
    ax.set_ylabel("messages/s")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def runs_compared(runs: Rows) -> Figure:
    """Rows/s of past runs, grouped by sink, labelled by their producer settings."""
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(runs) + 1.5))
    labels = [f"{r['run_id']} {r['sink']} {r.get('settings', '')}"[:70] for r in runs]
    colours = {"confluent": BLUE, "spark": ORANGE, "kafka-python": GREY}
    ax.barh(labels, [r["rows_per_s"] or 0 for r in runs], color=[colours.get(r["sink"], GREY) for r in runs])
    ax.invert_yaxis()
    ax.set_xlabel("rows/s")
    ax.set_title("runs compared (colour: sink)")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    return fig


def bench_results(summary: Rows) -> Figure:
    """`make bench`: per layout and input size, median rows/s per contestant (min–max
    whiskers) beside its command-to-exit time; both axes start at zero."""
    groups = sorted({(r["layout"], r.get("row_set", r["rows"])) for r in summary})
    fig, axes = plt.subplots(len(groups), 2, figsize=(12, 3.2 * len(groups)), squeeze=False)
    colours = {"ceiling": "#555555", "peer": "#999999", "baseline": ORANGE, "kappa-ingest": BLUE}
    for (ax, ax_exit), (layout, row_set) in zip(axes, groups, strict=True):
        rows = [r for r in summary if (r["layout"], r.get("row_set", r["rows"])) == (layout, row_set)]
        names = [r["contestant"] + (f" ({r['rows']:,} rows)" if r["rows"] < row_set else "") for r in rows]
        colour = [colours.get(r["kind"], GREY) for r in rows]
        med = [r["rows_per_s"] for r in rows]
        err = [[m - r["rows_per_s_min"] for m, r in zip(med, rows, strict=True)],
               [r["rows_per_s_max"] - m for m, r in zip(med, rows, strict=True)]]  # fmt: skip
        ax.barh(names, med, xerr=err, color=colour)
        ax.invert_yaxis()
        ax.set_xlim(left=0)
        ax.set_xlabel("rows/s (median, min–max)")
        ax.set_title(f"{layout}, {row_set:,} input rows: sending rate")
        for y, m in enumerate(med):
            ax.text(m, y, f" {m:,.0f}", va="center", fontsize=8)
        exits = [r.get("command_to_exit_s", 0.0) for r in rows]
        ax_exit.barh(names, exits, color=colour)
        ax_exit.invert_yaxis()
        ax_exit.set_xlim(left=0)
        ax_exit.set_yticks(range(len(names)), [""] * len(names))
        ax_exit.set_xlabel("seconds, command to exit (median)")
        ax_exit.set_title("what the user waits for")
        for y, e in enumerate(exits):
            ax_exit.text(e, y, f" {e:.1f} s", va="center", fontsize=8)
    fig.tight_layout()
    return fig


def sweep_heatmap(cells: Rows) -> Figure:
    """The sweep's rows/s by acks × batch.size (rows) and compression × partitions (columns)."""
    rows = sorted({(c["acks"], c["batch_size"]) for c in cells}, key=lambda r: (["0", "1", "all"].index(r[0]), r[1]))
    cols = sorted({(c["compression"], c["topic_partitions"]) for c in cells})
    grid = [[next((c["rows_per_s"] for c in cells if (c["acks"], c["batch_size"]) == r
                   and (c["compression"], c["topic_partitions"]) == k), float("nan")) for k in cols] for r in rows]  # fmt: skip
    fig, ax = plt.subplots(figsize=(1.6 * len(cols) + 2, 0.55 * len(rows) + 1.8))
    im = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cols)), [f"{c}\n{p} part." for c, p in cols])
    ax.set_yticks(range(len(rows)), [f"acks={a}, batch={b // 1024}K" for a, b in rows])
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v / 1000:.0f}K", ha="center", va="center", color="white", fontsize=8)
    fig.colorbar(im, label="rows/s")
    ax.set_title("rows/s by producer settings")
    fig.tight_layout()
    return fig


def png(fig: Figure) -> bytes:
    """A figure as PNG bytes (and closed)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
