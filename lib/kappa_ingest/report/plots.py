"""The figures of a run and of many runs, shared by the notebook and the HTML report.

A run's figures take the run's tables as ``metrics_store.run(metrics_dir, run_id)`` returns
them (``metrics_store.run_rows(summary)`` gives the same from a summary.json); the others take
plain rows (lists of dicts). Each returns a matplotlib Figure; nothing here reads or writes.
Every rate axis starts at zero: a bar from 117,500 makes 15% look like a factor of four.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from kappa_ingest.report.phases import parse_time
from kappa_ingest.report.run import stage_label
from kappa_ingest.report.watch_view import WatchView

Rows = Sequence[dict[str, Any]]
RunTables = dict[str, list[dict[str, Any]]]  # metrics_store.run(...) or metrics_store.run_rows(summary)
BLUE, ORANGE, GREY = "#2b6cb0", "#d98c3a", "#777777"
THOUSANDS = FuncFormatter(lambda v, _: f"{v:,.0f}")


def _since(t0: datetime) -> Callable[[Any], float]:
    """Seconds on the run's own clock: 0 is the moment the command started."""
    return lambda v: (parse_time(v) - t0).total_seconds()


def _failed(task: dict[str, Any]) -> bool:
    return task.get("status", "SUCCESS") != "SUCCESS"


def _executor_order(executor_id: Any) -> tuple[int, int, str]:
    """Executors by number (2 before 10), the driver's local one first."""
    e = str(executor_id)
    return (1, int(e), e) if e.isdigit() else (0, 0, e)


def slots(tasks: Rows, cores: dict[Any, int] | None = None) -> list[int]:
    """Each task's slot on its executor: the lowest lane free when it launched, so tasks that
    ran side by side on one executor never share a lane (a slot is a core running a task).
    An executor has no more lanes than its ``cores``: a task launched the instant its core
    freed can look as if it began before the last one ended (Spark's times are rounded, and
    a task's duration ends after its result is sent), and takes the lane that ended first."""
    cores = cores or {}
    ends: dict[Any, list[float]] = {}
    out = [0] * len(tasks)
    for i in sorted(range(len(tasks)), key=lambda i: parse_time(tasks[i]["launched_at"])):
        t = tasks[i]
        start = parse_time(t["launched_at"]).timestamp()
        lanes = ends.setdefault(t["executor_id"], [])
        # A millisecond of grace: Spark's launch times and durations are rounded to it.
        free = next((k for k, end in enumerate(lanes) if end <= start + 0.001), len(lanes))
        if free == len(lanes) and 0 < cores.get(t["executor_id"], 0) <= len(lanes):
            free = min(range(len(lanes)), key=lanes.__getitem__)
        elif free == len(lanes):
            lanes.append(0.0)
        lanes[free] = start + t["duration_s"]
        out[i] = free
    return out


def _held(tasks: Rows, slot: list[int], starts: list[float]) -> list[float]:
    """How long each task held its slot: its duration, but never past the launch of the next
    task in its lane. Spark ends a task's duration when the driver has handled its result,
    and frees the core (launching the next task on it) before that, by as long as a busy
    driver takes: the overlap is the driver's bookkeeping, not two tasks on one core."""
    widths = [t["duration_s"] for t in tasks]
    by_lane: dict[tuple[Any, int], list[int]] = {}
    for i in sorted(range(len(tasks)), key=starts.__getitem__):
        by_lane.setdefault((tasks[i]["executor_id"], slot[i]), []).append(i)
    for order in by_lane.values():
        for i, j in itertools.pairwise(order):
            widths[i] = max(0.0, min(widths[i], starts[j] - starts[i]))
    return widths


def _sending(run: RunTables) -> tuple[float, float] | None:
    """The sending stage(s)' start and end on the run's clock."""
    stages = [s for s in run["stages"] if s.get("sends") and s.get("submitted_at") and s.get("completed_at")]
    if not stages:
        return None
    since = _since(parse_time(run["runs"][0]["started_at"]))
    return min(since(s["submitted_at"]) for s in stages), max(since(s["completed_at"]) for s in stages)


def executor_rates(run: RunTables) -> Figure:
    """Rows/s per executor over its span (bars), and each of its tasks' own rows/s (dots, with
    a min–max whisker): the spread says whether one slow task or a slow executor set the pace."""
    executors = sorted(run["executors"], key=lambda e: _executor_order(e["executor_id"]))
    tasks = [t for t in run["tasks"] if not _failed(t)]
    fig, ax = plt.subplots(figsize=(6.2, 0.55 * len(executors) + 1.7))
    names = [f"executor {e['executor_id']}\n({e['host']})" for e in executors]
    ax.barh(range(len(executors)), [e["rows_per_s"] or 0 for e in executors], color=BLUE, alpha=0.85, height=0.6,
            label="executor: its rows over its span")  # fmt: skip
    for y, e in enumerate(executors):
        rates = [t["rows_per_s"] or 0 for t in tasks if t["executor_id"] == e["executor_id"]]
        if rates:
            ax.plot([min(rates), max(rates)], [y, y], color="black", lw=1)
            ax.scatter(rates, [y] * len(rates), color="white", edgecolor="black", zorder=3, s=22,
                       label="each task's rows/s (min–max)" if y == 0 else None)  # fmt: skip
        ax.text(max([e["rows_per_s"] or 0, *rates]), y, f" {e['rows_per_s'] or 0:,.0f} rows/s\n {e['rows']:,} rows", va="center",
                fontsize=8)  # fmt: skip
    ax.set_yticks(range(len(executors)), names, fontsize=8)
    ax.set_xlim(left=0, right=max([e["rows_per_s"] or 0 for e in executors] + [t["rows_per_s"] or 0 for t in tasks]
                                  + [1]) * 1.4)  # fmt: skip
    ax.xaxis.set_major_formatter(THOUSANDS)
    ax.set_xlabel("rows/s")
    ax.set_title("rows/s per executor", fontsize=10)
    ax.invert_yaxis()
    fig.legend(loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


def task_timeline(run: RunTables) -> Figure:
    """The sending stage's tasks: one lane per executor slot, a bar per task attempt coloured by
    stage, failed attempts hatched; seconds on the run's clock (0 = the command started)."""
    tasks = run["tasks"]
    since = _since(parse_time(run["runs"][0]["started_at"]))
    slot = slots(tasks, {e["executor_id"]: e.get("cores") or 0 for e in run.get("executors", [])})
    lanes = sorted(
        {(t["executor_id"], s) for t, s in zip(tasks, slot, strict=True)}, key=lambda k: (_executor_order(k[0]), k[1])
    )
    stages = sorted({t["stage_id"] for t in tasks})
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(6.2, 0.42 * len(lanes) + 1.9))
    starts = [since(t["launched_at"]) for t in tasks]
    widths = _held(tasks, slot, starts)
    span = max(s + w for s, w in zip(starts, widths, strict=True)) - min(starts) if tasks else 1.0
    for t, s, start, width in zip(tasks, slot, starts, widths, strict=True):
        y, failed = lanes.index((t["executor_id"], s)), _failed(t)
        ax.barh(y, width, left=start, height=0.7, color=colours(stages.index(t["stage_id"]) % 10),
                edgecolor="#b00000" if failed else "white", hatch="////" if failed else None,
                alpha=0.55 if failed else 1.0)  # fmt: skip
        wide = width >= 0.2 * span  # room for the rows beside the partition
        label = f"p{t['partition']}" + (f" try {t['attempt'] + 1}" if t.get("attempt") else "")
        label += f", {t['rows']:,} rows" if wide and not t.get("attempt") and not failed else ""
        ax.text(start + width / 2, y, label, ha="center", va="center", fontsize=7, clip_on=True,
                color="black" if failed else "white")  # fmt: skip
    ax.set_yticks(range(len(lanes)), [f"executor {e} · slot {s + 1}" for e, s in lanes], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the command started")
    ax.set_title("sending tasks, one lane per executor slot", fontsize=10)
    names = {s["stage_id"]: stage_label(s, run["runs"][0].get("sink") or "?") for s in run["stages"]}
    handles = [Patch(color=colours(i % 10), label=names.get(sid, f"stage {sid}")) for i, sid in enumerate(stages)]
    if any(_failed(t) for t in tasks):
        handles.append(Patch(facecolor="white", edgecolor="#b00000", hatch="////", label="failed attempt"))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def broker_curve(run: RunTables, title: str = "messages/s arriving at the broker") -> Figure:
    """Messages/s each second at the broker on the run's clock, with the sending stage's start
    and end marked and the run's phases as a band; Kafka's one-minute rate over it (the figure
    of Hesse et al.), drawn faint and labelled warming up on runs too short for it to mean much."""
    from kappa_ingest.report.broker_rate import WARM_S, seconds_sampled, warming_up
    from kappa_ingest.report.phases import COLOURS, LABELS, PHASES

    r, points = run["runs"][0], run["broker_rate"]
    since = _since(parse_time(r["started_at"]))
    xs = [since(p["t"]) for p in points]
    fig, ax = plt.subplots(figsize=(6.2, 3.9))
    ax.plot(xs, [p["messages_per_s"] for p in points], color=BLUE, lw=1.4, label="messages/s (1 s samples)")
    sampled = round(seconds_sampled(points))
    if warming_up(sampled):
        ax.plot(xs, [p["one_minute_rate"] for p in points], color=GREY, lw=1, ls="--",
                label=f"Kafka one-minute rate, warming up ({sampled} s of the {WARM_S} s it needs)")  # fmt: skip
    else:
        ax.plot(xs, [p["one_minute_rate"] for p in points], color=ORANGE, lw=2, label="Kafka one-minute rate")
    top = max([p["messages_per_s"] for p in points] + [1]) * 1.3
    ax.set_ylim(0, top)
    ax.yaxis.set_major_formatter(THOUSANDS)
    sending = _sending(run)
    if sending:
        for x, word in zip(sending, ("sending starts", "ends"), strict=True):
            ax.axvline(x, color="black", lw=0.8, ls=":")
            ax.text(x, top * 0.86, f" {word}", fontsize=7, va="top", rotation=90)
    # The phases as a band along the top: where the command's time went, on the same clock.
    start = 0.0
    for phase in PHASES:
        seconds = r.get(f"{phase}_s") or 0.0
        if seconds > 0:
            ax.axvspan(start, start + seconds, ymin=0.93, ymax=1.0, color=COLOURS[phase], lw=0)
            if seconds >= 0.06 * (r.get("wall_s") or 1):
                ax.text(start + seconds / 2, top * 0.965, LABELS[phase], ha="center", va="center", fontsize=7)
        start += seconds
    ax.set_xlim(0, max(start, xs[-1] if xs else 0, 1))
    ax.set_xlabel("seconds since the command started (band: phases of the run)")
    ax.set_ylabel("messages/s")
    ax.set_title(title, fontsize=10)
    fig.legend(loc="lower center", ncol=1, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def runs_compared(runs: Rows) -> Figure:
    """Rows/s of past runs, grouped by sink, labelled by their producer settings."""
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(runs) + 1.5))
    labels = [f"{r['run_id']} {r['sink']} {r.get('settings', '')}"[:70] for r in runs]
    colours = {"confluent": BLUE, "spark": ORANGE, "kafka-python": GREY}
    ax.barh(labels, [r["rows_per_s"] or 0 for r in runs], color=[colours.get(r["sink"], GREY) for r in runs])
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.xaxis.set_major_formatter(THOUSANDS)
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
        ax.xaxis.set_major_formatter(THOUSANDS)
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


def configured_vs_achieved(runs: Rows) -> Figure:
    """The sweep's throttle: each configured rate (tick) against the broker's steady rate (bar)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [f"{r['configured'] / 1000:.0f}K" if r["configured"] else "unthrottled" for r in runs]
    ax.bar(labels, [r["achieved"] for r in runs], color=BLUE, label="achieved (broker, steady)")
    ax.scatter(labels, [r["configured"] or float("nan") for r in runs], color="black", marker="_", s=600,
               label="configured", zorder=3)  # fmt: skip
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(THOUSANDS)
    ax.set_ylabel("messages/s")
    ax.set_title("configured vs achieved input rate")
    ax.legend()
    fig.tight_layout()
    return fig


def scaling(result: dict[str, Any]) -> Figure:
    """`make scaling`: rows/s against partitions, and rows/s and peak memory against input size."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    bp = result["by_partitions"]
    a.plot([r["partitions"] for r in bp], [r["rows_per_s"] for r in bp], "o-", color=BLUE)
    for r in bp:
        a.annotate(f"{r['rows_per_s']:,.0f}", (r["partitions"], r["rows_per_s"]), textcoords="offset points",
                   xytext=(0, 6), ha="center", fontsize=8)  # fmt: skip
    a.set_xlabel("partitions (= concurrent producers, local[N])")
    a.set_ylabel("rows/s")
    a.yaxis.set_major_formatter(THOUSANDS)
    a.set_xticks([r["partitions"] for r in bp])
    a.set_ylim(0, max(r["rows_per_s"] for r in bp) * 1.2)
    a.margins(x=0.12)
    a.set_title(f"{bp[0]['rows']:,} rows")
    bs = result["by_size"]
    b.semilogx([r["rows"] for r in bs], [r["rows_per_s"] for r in bs], "o-", color=BLUE, label="rows/s (run)")
    b.semilogx([r["rows"] for r in bs], [r["steady_rows_per_s"] for r in bs], "^:", color=BLUE,
               label="rows/s (broker, steady)")  # fmt: skip
    b.legend(loc="lower right", fontsize=8)
    b.set_xlabel("input rows")
    b.set_ylabel("rows/s")
    b.yaxis.set_major_formatter(THOUSANDS)
    b.set_ylim(0, max(max(r["rows_per_s"], r["steady_rows_per_s"]) for r in bs) * 1.2)
    twin = b.twinx()
    twin.semilogx([r["rows"] for r in bs], [r["peak_rss_mb"] for r in bs], "s--", color=ORANGE, label="peak MB")
    twin.set_ylabel("peak memory, MB (dashed)")
    twin.set_ylim(0, max(r["peak_rss_mb"] for r in bs) * 1.2)
    b.set_title("2 partitions")
    fig.tight_layout()
    return fig


def png(fig: Figure) -> bytes:
    """A figure as PNG bytes (and closed)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def watch_timeline(watch: WatchView) -> Figure:
    """A watch batch by batch on its own clock (0 = its first batch started): each batch a bar
    as long as it ran (red: failed or stopped), each file a dot at its commit, as high as its
    latency from landing; below, the files waiting (landed, not yet committed) over time."""
    t0 = watch.started_at
    since = _since(t0)
    fig, (top, below) = plt.subplots(2, 1, figsize=(12, 5.2), sharex=True, height_ratios=(3, 2))
    files = watch.files
    lat = [f["latency_s"] for f in files]
    ceiling = max([*lat, 1.0]) * 1.25
    for b in watch.batches:
        ok = b.status == "succeeded"
        top.broken_barh([(since(b.started_at), max(b.wall_s, 0.05))], (0, ceiling * 0.04),
                        color=BLUE if ok else "#c53030", alpha=0.8)  # fmt: skip
    top.scatter([since(f["committed_at"]) for f in files], lat, s=14, color=ORANGE, zorder=3,
                label="a file: latency, landing to commit")  # fmt: skip
    top.set_ylim(0, ceiling)
    top.set_ylabel("latency, s")
    top.set_title(f"watch {watch.watch_id}: {len(watch.batches):,} batches, {len(files):,} files", fontsize=10)
    top.legend(loc="upper left", fontsize=7, frameon=False, handles=[*top.get_legend_handles_labels()[0],
               Patch(color=BLUE, label="a batch, as long as it ran (red: failed or stopped)")])  # fmt: skip
    events = sorted([(since(f["landed_at"]), 1) for f in files] + [(since(f["committed_at"]), -1) for f in files])
    xs, ys, waiting = [0.0], [0], 0
    for x, step in events:
        waiting += step
        xs.append(x)
        ys.append(waiting)
    below.step(xs, ys, where="post", color=GREY)
    below.fill_between(xs, ys, step="post", color=GREY, alpha=0.3)
    below.set_ylim(0, max([*ys, 1]) * 1.2)
    below.set_ylabel("files waiting")
    below.set_xlabel("seconds since the watch's first batch started")
    below.set_xlim(left=min([0.0, *xs]))
    fig.tight_layout()
    return fig
