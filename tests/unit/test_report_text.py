"""`kappa-ingest report --last N` and `--compare A B` on a real Delta store (written and read
with deltalake, as the job does), from hand-made run summaries."""

from __future__ import annotations

import json
import re

import pytest

from kappa_ingest import cli
from kappa_ingest.errors import UsageError
from kappa_ingest.report import store as metrics_store
from kappa_ingest.report import text as report_text

CHECKS = [{"name": "rows_read = rows_sent + rows_quarantined", "ok": True, "expected": 9, "actual": 9},
          {"name": "topic grew by rows_sent", "ok": True, "expected": 9, "actual": 9}]  # fmt: skip


def summary(run_id: str, started: str, *, rows: int, wall_s: float, ingest_s: float, linger: str = "20",
            status: str = "succeeded", checks: list | None = None) -> dict:  # fmt: skip
    phases = {"startup_s": 4.0, "setup_s": 3.0, "sending_s": ingest_s, "reconcile_s": 0.5,
              "recording_s": round(wall_s - 7.5 - ingest_s, 3)}  # fmt: skip
    return {
        "run_id": run_id, "status": status, "error": None if status == "succeeded" else "broker went away",
        "sink": "confluent", "topic": "orders", "bootstrap_servers": "127.0.0.1:9092", "spark_master": "local[2]",
        "started_at": started, "wall_s": wall_s, "ingest_s": ingest_s, "phases": phases,
        "rows_read": rows, "rows_sent": rows, "rows_quarantined": 0, "bytes_sent": rows * 500,
        "rows_per_s": round(rows / ingest_s, 1) if ingest_s else 0.0,
        "mb_per_s": round(rows * 500 / 1e6 / ingest_s, 3) if ingest_s else 0.0,
        "broker": {"rate": {"peak_messages_per_s": 150_000.0, "steady_messages_per_s": 120_000.0,
                            "time_to_first_record_s": 1.0}},
        "delivery": {"mode": "exactly-once"}, "checks": CHECKS if checks is None else checks,
        "config": {"run_id": run_id, "lineage": run_id, "topic": "orders", "partitions": 2,
                   "kafka_opts": {"acks": "all", "linger.ms": linger}},
    }  # fmt: skip


@pytest.fixture
def store(tmp_path):
    runs = [
        summary("r1-old", "2026-11-20T10:00:00.000Z", rows=1_000_000, wall_s=16.0, ingest_s=6.0),
        summary("r2-new", "2026-11-21T10:00:00.000Z", rows=1_000_000, wall_s=14.0, ingest_s=5.0, linger="50"),
        summary("r3-failed", "2026-11-22T10:00:00.000Z", rows=0, wall_s=7.5, ingest_s=0.0, status="failed",
                checks=[{**CHECKS[0], "ok": False, "actual": 3}]),
    ]  # fmt: skip
    for s in runs:
        metrics_store.record_run(tmp_path, s)
    return tmp_path


def test_last_runs_two_lines_each_newest_first_aligned_within_120_columns(store):
    lines = report_text.last_lines(metrics_store.last_runs(store, 10)).splitlines()
    firsts = [line for line in lines[1:] if not line.startswith(" ")]
    assert [line.split()[0] for line in firsts] == ["r3-failed", "r2-new", "r1-old"]
    assert [line for line in lines[1:] if line.startswith(" ")] == ["  confluent -> orders"] * 3
    head = lines[0]
    # The end-to-end time stands right beside the sending rate.
    assert head.index("end to end s") < head.index("rows/s") and "rows sent" not in head[head.index("end to end") :]
    # Numbers right-aligned under their headings: each column's right edge is the heading's.
    for heading in ("rows sent", "end to end s", "rows/s"):
        edge = head.index(heading) + len(heading)
        assert all(line[edge - 1] != " " and line[edge : edge + 1] in (" ", "") for line in firsts), heading
    r2 = next(line for line in lines if line.startswith("r2-new"))
    assert "1,000,000" in r2 and " 14.0 " in r2 and " 200,000 " in r2 and "2/2" in r2
    r3 = next(line for line in lines if line.startswith("r3-failed"))
    assert "failed" in r3 and "0/1" in r3 and " 7.5 " in r3
    assert r3.split()[6:8] == ["-", "-"]  # no sending stage ran: no rate, no sending time


def test_last_runs_fit_120_columns_with_long_names(store):
    runs = metrics_store.last_runs(store, 10)
    long = [{**r, "run_id": "20261125T001028Z-1a2b3c", "sink": "kafka-python", "topic": "t" * 200,
             "rows_sent": 10_000_000, "rows_per_s": 187_688.0, "wall_s": 1234.5} for r in runs]  # fmt: skip
    lines = report_text.last_lines(long).splitlines()
    assert max(len(line) for line in lines) <= 120 and lines[2].endswith("…")


def test_compare_two_runs_side_by_side(store):
    a, b = (metrics_store.run(store, rid)["runs"][0] for rid in ("r1-old", "r2-new"))
    text = report_text.compare([a, b])
    rows = {re.split(r"\s{2,}", line.strip())[0]: line for line in text.splitlines() if line.startswith("  ")}
    assert rows["rows/s (sending)"].split()[-3:] == ["166,667", "200,000", "+20%"]
    assert rows["end to end"].split()[-3:] == ["16.0", "14.0", "-12%"]
    for phase in ("start-up", "set-up", "sending", "reconcile", "recording"):
        assert phase in rows
    assert rows["sent"].split()[-1] == "="
    # Only the setting that differs: linger.ms; run_id and lineage differ by design.
    differ = text.split("settings that differ")[1].strip().splitlines()
    assert len(differ) == 1 and differ[0].split() == ["kafka_opts.linger.ms", '"20"', '"50"']


def test_compare_says_when_no_setting_differs_and_shows_failed_checks(store):
    runs = [metrics_store.run(store, rid)["runs"][0] for rid in ("r1-old", "r3-failed")]
    text = report_text.compare(runs)
    assert "checks failed in r3-failed: rows_read = rows_sent + rows_quarantined" in text
    assert "error of r3-failed: broker went away" in text
    same = report_text.compare([runs[0], metrics_store.run(store, "r1-old")["runs"][0]])
    assert same.rstrip().endswith("settings that differ: none")


def test_a_long_error_is_wrapped_to_the_width_of_the_table(store):
    long = summary("r4-long", "2026-11-23T10:00:00.000Z", rows=0, wall_s=7.5, ingest_s=0.0, status="failed")
    long["error"] = "KafkaException: " + "Broker: Topic authorization failed for topic orders " * 10 + "\nat line 2"
    metrics_store.record_run(store, long)
    runs = [metrics_store.run(store, rid)["runs"][0] for rid in ("r1-old", "r4-long")]
    lines = report_text.compare(runs).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error of r4-long: KafkaException: Broker"))
    error = lines[start : lines.index("", start)]
    # Three lines at most, the later ones indented; the rest, its own newline too, cut.
    assert [line[:2] for line in error] == ["er", "  ", "  "] and error[2].endswith(" …")
    assert max(len(line) for line in lines) <= 110


def test_a_run_missing_from_the_store_is_a_usage_error(store):
    with pytest.raises(UsageError, match="run nope: no such run"):
        metrics_store.run(store, "nope")


def run_cli(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.setattr(cli, "exit_on_sigterm", lambda: None)  # the test process keeps its own handlers
    code = cli.main(["report", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_report_command_last_compare_and_unknown_run(store, monkeypatch, capsys):
    code, out, _ = run_cli(["--metrics-dir", str(store), "--last", "2"], monkeypatch, capsys)
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1::2]] == ["r3-failed", "r2-new"]
    code, out, _ = run_cli(["--metrics-dir", str(store), "--compare", "r1-old", "r2-new"], monkeypatch, capsys)
    assert code == 0 and "B vs A" in out and "kafka_opts.linger.ms" in out
    code, out, err = run_cli(["--metrics-dir", str(store), "--compare", "r1-old", "nope"], monkeypatch, capsys)
    assert code != 0 and out == "" and len(err.strip().splitlines()) == 1 and "run nope: no such run" in err
    code, _, err = run_cli(["--metrics-dir", str(store / "elsewhere"), "--last", "2"], monkeypatch, capsys)
    assert code != 0 and "no metrics store" in err


def test_checks_recorded_by_name_and_count(store):
    r = metrics_store.run(store, "r3-failed")["runs"][0]
    assert (r["checks_held"], r["checks_total"], r["checks_ok"]) == (0, 1, False)
    assert json.loads(r["checks_json"])[0]["actual"] == 3


def test_checks_of_a_run_recorded_before_their_counts():
    """checks_ok alone, from an older store: trusted for a run that succeeded, not for one that
    failed (it may have stopped before any check, and all([]) is True)."""
    old = {"checks_held": None, "checks_total": None, "checks_ok": True}
    assert report_text.checks_verdict({**old, "status": "succeeded"}) == ("all hold", "ok", False)
    assert report_text.checks_verdict({**old, "status": "failed"}) == ("not recorded", "?", True)
    assert report_text.checks_verdict({"checks_held": 0, "checks_total": 0, "status": "failed"})[0] == "none ran"


def test_last_needs_at_least_one_run(store, monkeypatch, capsys):
    code, out, err = run_cli(["--metrics-dir", str(store), "--last", "0"], monkeypatch, capsys)
    assert code != 0 and out == "" and "--last 0" in err
