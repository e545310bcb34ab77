"""``kappa-ingest report`` in the terminal: past runs a line each (``--last N``), and runs side
by side (``--compare A B``, and ``--run-id`` for one), from rows of the Delta ``runs`` table."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from kappa_ingest.report.phases import LABELS, PHASES
from kappa_ingest.report.run import MB
from kappa_ingest.report.watch_view import WatchView

Row = dict[str, Any]
# Settings that differ from run to run by design: comparing them says nothing.
PER_RUN = {"run_id", "lineage"}


def number(v: Any, digits: int = 1, whole_from: float = 1000) -> str:
    """Thousands separated; a float from ``whole_from`` up without decimals (88,378 rows/s)."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= whole_from else f"{v:,.{digits}f}"
    return str(v)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _wrapped(text: str, width: int = 100, max_lines: int = 3) -> list[str]:
    # A long error (a Java exception's message, a path) would otherwise be one line wider than
    # the table above it; past a few lines the run's summary.json has the whole of it.
    return textwrap.wrap(" ".join(text.split()), width, subsequent_indent="  ", max_lines=max_lines, placeholder=" …")


def checks(r: Row) -> list[Row]:
    """The run's checks as recorded ({name, ok, expected, actual}); none for a store older than them."""
    return json.loads(r["checks_json"]) if r.get("checks_json") else []


def checks_verdict(r: Row) -> tuple[str, str, bool]:
    """(``7 of 7 hold``, ``7/7``, whether to alarm): from the counts, or for a run recorded
    before them from checks_ok, trusted only for a run that succeeded (a failed one may
    have stopped before any check)."""
    held, total = r.get("checks_held"), r.get("checks_total")
    if total:
        return f"{held} of {total} hold", f"{held}/{total}", held != total
    if total is None and r.get("checks_ok") is not None and r.get("status") == "succeeded":
        return ("all hold", "ok", False) if r["checks_ok"] else ("failed", "FAILED", True)
    if total is None:
        return "not recorded", "?", r.get("status") != "succeeded"
    return "none ran", "-", r.get("status") != "succeeded"


def when(t: Any) -> str | None:
    """A run's UTC start as people read it, to the second."""
    return t.strftime("%Y-%m-%d %H:%M:%S") if t else None


def _align(rows: list[list[str]], left: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def last_lines(entries: list[Row | WatchView], width: int = 120, batches: int = 5) -> str:
    """Two lines a run, newest first as given, within ``width`` columns: its figures aligned
    (the end-to-end time beside the sending rate, since a fast sending stage in a slow
    command is still a slow command), then its sink and topic, whose names can be long. A
    watch is one entry (its batches summed, end to end from its first batch to its last),
    then its last ``batches`` batches as a timeline."""
    head = ["run", "started (UTC)", "status", "rows sent", "end to end s", "rows/s", "sending s", "checks"]
    body = [_watch_row(e) if isinstance(e, WatchView) else _run_row(e) for e in entries]
    aligned = _align([head, *body], left={0, 1, 2})
    out = [aligned[0]]
    for line, e in zip(aligned[1:], entries, strict=True):
        out.append(line[:width])
        if isinstance(e, WatchView):
            out.append(_cut(f"  {watch_headline(e)}", width))
            out += [f"    {t}"[:width] for t in watch_timeline(e, last=batches).splitlines()]
        else:
            out.append(_cut(f"  {e.get('sink') or '-'} -> {e.get('topic') or '-'}", width))
    return "\n".join(out)


def _run_row(r: Row) -> list[str]:
    return [r["run_id"], (when(r.get("started_at")) or "-")[:16], str(r.get("status") or "-"),
            number(r.get("rows_sent")), number(r.get("wall_s")),
            number(r.get("rows_per_s")) if r.get("ingest_s") else "-",
            number(r.get("ingest_s")) if r.get("ingest_s") else "-", checks_verdict(r)[1]]  # fmt: skip


def _watch_row(w: WatchView) -> list[str]:
    status = f"watch, {w.failed} failed" if w.failed else "watch"
    return [w.watch_id, (when(w.started_at) or "-")[:16], status, number(w.rows), number(w.span_s), "-", "-", "-"]


def watch_headline(w: WatchView) -> str:
    """A watch in one line: batches, files, latency, the most files that waited."""
    p50, p99 = w.latency(0.5), w.latency(0.99)
    latency = f"latency p50 {p50:.1f} s, p99 {p99:.1f} s" if p50 is not None else "no file sent"
    return (f"{w.sink} -> {w.topic}: {len(w.batches):,} batches ({w.failed} failed or stopped), {len(w.files):,} files;"
            f" {latency}; up to {w.most_waiting} waiting")  # fmt: skip


def watch_timeline(w: WatchView, last: int | None = None) -> str:
    """The watch's batches a line each, oldest first (the ``last`` ones only, if given):
    when, how it ended, what it sent, its slowest file, and the files waiting at its start."""
    shown = w.batches[max(0, len(w.batches) - last) :] if last is not None else w.batches
    head = ["batch", "started (UTC)", "status", "files", "rows", "s", "latency max s", "waiting"]
    body = [[b.run_id.removeprefix(w.watch_id + "-"), (when(b.started_at) or "-")[11:], b.status, number(b.files),
             number(b.rows), number(b.wall_s), number(b.latency_max_s), number(b.waiting)] for b in shown]  # fmt: skip
    lines = _align([head, *body], left={0, 1, 2})
    if len(shown) < len(w.batches):
        lines.append(f"({len(w.batches) - len(shown):,} earlier batch(es): report --run-id {w.watch_id})")
    return "\n".join(lines)


def _flat(config: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(config, dict):
        return {prefix: config}
    out: dict[str, Any] = {}
    for k, v in config.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def settings_that_differ(runs: list[Row]) -> list[tuple[str, list[str]]]:
    """(setting, each run's value) for every setting whose values are not all the same."""
    flat = [_flat(json.loads(r["config_json"]) if r.get("config_json") else {}) for r in runs]
    keys = sorted({k for f in flat for k in f} - PER_RUN)
    differ = []
    for k in keys:
        values = [json.dumps(f[k], default=str) if k in f else "(unset)" for f in flat]
        if len(set(values)) > 1:
            differ.append((k, values))
    return differ


def _change(a: Any, b: Any) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or isinstance(a, bool):
        return ""
    if a == b:
        return "="
    if not a:
        return ""
    change = (b - a) / a
    return f"{change:+.1%}" if abs(change) < 0.01 else f"{change:+.0%}"


def compare(runs: list[Row], width: int = 30) -> str:
    """Runs side by side, a column each (one run: its totals); with two, a column of B against
    A. Sections: the run, rows, time (end to end and each phase), rates, checks, then the
    settings that differ."""
    sections: list[tuple[str, list[tuple[str, str]]]] = [
        ("run", [("status", "status"), ("sink", "sink"), ("topic", "topic"), ("bootstrap", "bootstrap_servers"),
                 ("Spark master", "spark_master"), ("started (UTC)", "started_at"), ("delivery", "delivery_mode")]),
        ("rows", [("read", "rows_read"), ("sent", "rows_sent"), ("quarantined", "rows_quarantined"),
                  ("MB sent", "mb_sent")]),
        ("time, s", [("end to end", "wall_s"), *((f"  {LABELS[p]}", f"{p}_s") for p in PHASES),
                     ("sending stage", "ingest_s")]),
        ("rates", [("rows/s (sending)", "rows_per_s"), ("MB/s (sending)", "mb_per_s"),
                   ("broker peak msg/s", "peak_messages_per_s"), ("broker steady msg/s", "steady_messages_per_s"),
                   ("first record after s", "time_to_first_record_s")]),
        ("checks", [("held", "checks")]),
    ]  # fmt: skip
    derived = [
        {**r, "mb_sent": None if r.get("bytes_sent") is None else r["bytes_sent"] / MB, "checks": checks_verdict(r)[1],
         "started_at": when(r.get("started_at"))}
        for r in runs
    ]  # fmt: skip
    two = len(runs) == 2
    table = [["", *(_cut(r["run_id"], width) for r in runs), *(["B vs A"] if two else [])]]
    if two:
        table.append(["", "A", "B", ""])
    for title, rows in sections:
        table.append([title, *([""] * (len(runs) + two))])
        for label, key in rows:
            values = [r.get(key) for r in derived]
            cells = [_cut(number(v), width) for v in values]
            table.append([f"  {label}", *cells, *([_change(*values)] if two else [])])
    lines = _align(table, left={0})
    for r in runs:
        if r.get("error"):
            lines += _wrapped(f"error of {r['run_id']}: {r['error']}")
    for r in runs:
        failed = [c["name"] for c in checks(r) if not c["ok"]]
        if failed:
            lines += _wrapped(f"checks failed in {r['run_id']}: {'; '.join(failed)}")
    if len(runs) > 1:
        differ = settings_that_differ(runs)
        lines += ["", "settings that differ" + ("" if differ else ": none")]
        if differ:
            lines += _align([[f"  {k}", *(_cut(v, width) for v in values)] for k, values in differ], left=set(range(3)))
    return "\n".join(lines)


def executors(rows: list[Row]) -> str:
    """One run's executors, with human labels."""
    head = ["executor", "host", "tasks", "rows", "busy s", "span s", "rows/s", "MB/s", "loops"]
    body = [[str(e["executor_id"]), str(e["host"]), number(e.get("tasks")), number(e.get("rows")), number(e.get("busy_s")),
             number(e.get("span_s")), number(e.get("rows_per_s")), number(e.get("mb_per_s")), e.get("record_loops") or "-"]
            for e in rows]  # fmt: skip
    return "\n".join(_align([head, *body], left={0, 1, 8}))
