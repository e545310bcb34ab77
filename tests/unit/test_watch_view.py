"""A watch in the report: its batches grouped into one entry of ``report --last``, its
timeline (the files waiting at each batch's start, counted from landing and commit times),
its latency quantiles, its figure and its page; written to and read from a real Delta store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import matplotlib.pyplot as plt
import pytest

from kappa_ingest import cli
from kappa_ingest.report import html as report_html
from kappa_ingest.report import plots
from kappa_ingest.report import store as metrics_store
from kappa_ingest.report.watch_view import Waiting, newest_first, watch_view

T0 = datetime(2026, 11, 26, 15, 0, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def batch(n: int, start: float, wall: float, rows: int, status: str = "succeeded", watch: str = "w1") -> dict:
    return {"run_id": f"{watch}-b{n:05d}", "watch_id": watch, "started_at": at(start), "wall_s": wall,
            "rows_sent": rows, "status": status, "sink": "confluent", "topic": "orders"}  # fmt: skip


def sent(batch_no: int, name: str, landed: float, committed: float, rows: int = 100, watch: str = "w1") -> dict:
    return {"watch_id": watch, "run_id": f"{watch}-b{batch_no:05d}", "file": f"/landing/{name}", "bytes": rows * 50,
            "rows": rows, "landed_at": at(landed), "committed_at": at(committed), "latency_s": committed - landed}  # fmt: skip


# Three batches: a.csv alone; b and c landed while the first ran (both waiting at the second's
# start, with d landing during it); the third failed and d went in with a fourth.
RUNS = [batch(1, 1.0, 1.5, 100), batch(2, 3.0, 2.0, 200), batch(3, 6.0, 0.5, 0, status="failed"),
        batch(4, 7.0, 1.0, 100)]  # fmt: skip
FILES = [sent(1, "a.csv", 0.8, 2.4), sent(2, "b.csv", 1.6, 4.9), sent(2, "c.csv", 2.2, 4.9),
         sent(4, "d.csv", 4.0, 7.9)]  # fmt: skip


def test_each_batch_knows_its_files_its_slowest_file_and_the_backlog_it_started_with():
    w = watch_view("w1", RUNS, FILES)
    assert [(b.files, b.rows, b.waiting, b.status) for b in w.batches] == [
        (1, 100, 1, "succeeded"), (2, 200, 2, "succeeded"), (0, 0, 1, "failed"), (1, 100, 1, "succeeded")]  # fmt: skip
    assert w.batches[1].latency_max_s == pytest.approx(3.3) and w.batches[2].latency_max_s is None
    assert w.rows == 400 and w.failed == 1 and w.most_waiting == 2
    assert w.span_s == pytest.approx(7.0)
    assert w.latency(0.5) == pytest.approx(2.7) and w.latency(0.99) == pytest.approx(3.9)
    assert Waiting(FILES).at(at(4.9)) == 1 and Waiting(FILES).at(at(2.4)) == 2  # committed at that instant: out


def test_report_last_shows_a_watch_as_one_entry_with_its_timeline(tmp_path, capsys):
    other = {**batch(1, 20.0, 3.0, 50, watch="x"), "run_id": "plain", "watch_id": None, "rows_per_s": 50.0,
             "ingest_s": 1.0}  # fmt: skip
    entries = newest_first([*RUNS, other], 10)
    assert [e if isinstance(e, str) else e["run_id"] for e in entries] == ["plain", "w1"]
    metrics = tmp_path / "m"
    metrics_store.append(str(metrics), {"runs": [*RUNS, other], "watch_files": FILES})
    assert cli.main(["report", "--metrics-dir", str(metrics), "--last", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("plain ") and out[3].startswith("w1 ") and "watch, 1 failed" in out[3]
    assert "400" in out[3] and out[4].endswith(
        "4 batches (1 failed or stopped), 4 files; latency p50 2.7 s, p99 3.9 s; up to 2 waiting"
    )
    timeline = out[5:]
    assert timeline[0].split() == ["batch", "started", "(UTC)", "status", "files", "rows", "s", "latency", "max", "s",
                                   "waiting"]  # fmt: skip
    assert [line.split()[:6] for line in timeline[1:]] == [
        ["b00001", "15:00:01", "succeeded", "1", "100", "1.5"], ["b00002", "15:00:03", "succeeded", "2", "200", "2.0"],
        ["b00003", "15:00:06", "failed", "0", "0", "0.5"], ["b00004", "15:00:07", "succeeded", "1", "100", "1.0"]]  # fmt: skip
    assert [line.split()[-1] for line in timeline[1:]] == ["1", "2", "1", "1"]

    page = tmp_path / "w1.html"
    assert cli.main(["report", "--metrics-dir", str(metrics), "--run-id", "w1", "--html", str(page)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("watch w1: confluent -> orders: 4 batches") and "b00004" in shown
    text = page.read_text()
    assert text.count("<img") == 1 and text.count("<tr>") == 1 + 4 and "w1-b00003" in text


def test_the_timeline_figure_draws_every_file_every_batch_and_the_backlog():
    fig = plots.watch_timeline(watch_view("w1", RUNS, FILES))
    top, below = fig.axes
    dots = top.collections[-1].get_offsets()
    want = sorted((f["committed_at"].timestamp() - at(1).timestamp(), f["latency_s"]) for f in FILES)
    assert [c for xy in sorted(map(tuple, dots.tolist())) for c in xy] == pytest.approx([c for xy in want for c in xy])
    assert len(top.collections) == 1 + len(RUNS)  # a bar per batch, then the files
    waiting = below.lines[0].get_ydata()
    assert max(waiting) == 3 and waiting[-1] == 0  # b, c and d between 4.0 s and 4.9 s
    plt.close(fig)
    assert report_html.render_watch_html(watch_view("w1", RUNS, FILES)).count("data:image/png") == 1
