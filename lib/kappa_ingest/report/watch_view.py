"""A watch as the metrics store holds it, batch by batch: what ``report``, the HTML page and
the notebook show of it (pure; rows as ``metrics_store.watch`` returns them).

A watch's batches are runs whose ``watch_id`` is the watch's; each file it sent is a row of
``watch_files`` (landed, committed, latency). The backlog a batch started with is counted
from those rows: the files that had landed by then and were committed later. Files refused
(overwritten, unsendable) were never committed and are not in it.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kappa_ingest.report.phases import parse_time

Row = dict[str, Any]


@dataclass(frozen=True)
class Batch:
    run_id: str
    started_at: datetime
    status: str
    files: int  # committed by this batch
    rows: int
    wall_s: float
    latency_max_s: float | None  # the slowest of its files, landing to commit
    waiting: int  # files landed and not yet committed when it started (itself included)


@dataclass(frozen=True)
class WatchView:
    watch_id: str
    topic: str
    sink: str
    batches: list[Batch]
    files: list[Row]  # watch_files rows, by commit time

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.batches)

    @property
    def failed(self) -> int:
        return sum(b.status != "succeeded" for b in self.batches)

    @property
    def started_at(self) -> datetime:
        return self.batches[0].started_at

    @property
    def span_s(self) -> float:
        """From the first batch's start to the last one's end."""
        last = self.batches[-1]
        return (last.started_at - self.started_at).total_seconds() + last.wall_s

    @property
    def most_waiting(self) -> int:
        return max((b.waiting for b in self.batches), default=0)

    def latency(self, q: float) -> float | None:
        """The ``q`` quantile of its files' latencies (nearest rank), None before any file."""
        values = sorted(f["latency_s"] for f in self.files)
        if not values:
            return None
        return values[min(len(values), max(1, math.ceil(q * len(values)))) - 1]


class Waiting:
    """How many of ``files`` had landed by a time and were committed after it (a file is
    committed after it lands: those committed by then had landed by then too)."""

    def __init__(self, files: list[Row]) -> None:
        self._landed = sorted(parse_time(f["landed_at"]) for f in files)
        self._committed = sorted(parse_time(f["committed_at"]) for f in files)

    def at(self, t: datetime) -> int:
        return bisect.bisect_right(self._landed, t) - bisect.bisect_right(self._committed, t)


def watch_view(watch_id: str, runs: list[Row], files: list[Row]) -> WatchView:
    """The watch ``watch_id`` from its batches' ``runs`` rows and its ``watch_files`` rows."""
    runs = sorted((r for r in runs if r.get("watch_id") == watch_id), key=lambda r: parse_time(r["started_at"]))
    files = sorted((f for f in files if f.get("watch_id") == watch_id), key=lambda f: parse_time(f["committed_at"]))
    by_batch: dict[str, list[Row]] = {}
    for f in files:
        by_batch.setdefault(f["run_id"], []).append(f)
    waiting = Waiting(files)
    batches = []
    for r in runs:
        mine = by_batch.get(r["run_id"], [])
        started = parse_time(r["started_at"])
        batches.append(Batch(r["run_id"], started, str(r.get("status") or "-"), len(mine), r.get("rows_sent") or 0,
                             r.get("wall_s") or 0.0, max((f["latency_s"] for f in mine), default=None),
                             waiting.at(started)))  # fmt: skip
    first = runs[0] if runs else {}
    return WatchView(watch_id, first.get("topic") or "-", first.get("sink") or "-", batches, files)


def newest_first(runs: list[Row], n: int) -> list[Row | str]:
    """The ``n`` newest entries of ``runs`` (newest first): a run's row, or a watch's id in
    place of all its batches (placed by its newest batch)."""
    out: list[Row | str] = []
    seen: set[str] = set()
    if n <= 0:
        return out
    for r in sorted(runs, key=lambda r: parse_time(r["started_at"]), reverse=True):
        wid = r.get("watch_id")
        if wid and wid in seen:
            continue
        if wid:
            seen.add(wid)
        out.append(wid or r)
        if len(out) == n:
            break
    return out
