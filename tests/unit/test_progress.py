"""Live progress: the line scheduled jobs get, and the row estimate behind it."""

from __future__ import annotations

import io

import pytest

from kappa_ingest import datagen
from kappa_ingest.report.progress import Progress
from kappa_ingest.source.inputs import estimate_rows


def test_log_line_names_rows_rates_and_time_left():
    p = Progress(1_000_000, quiet=True, stream=io.StringIO())
    p.settled_s = 180.0  # three minutes since the first sample: Kafka's one-minute rate has settled
    assert p.line(250_000, 50_000, 40_000) == (
        "kappa-ingest: 250,000 of ~1,000,000 (25%) rows acknowledged, 50,000 rows/s now,"
        " one-minute rate 40,000, about 15 s left"
    )
    assert p.line(10, 0, 0) == "kappa-ingest: 10 of ~1,000,000 (0%) rows acknowledged, 0 rows/s now, one-minute rate 0"
    p.settled_s = 12.0
    assert p.line(10, 0, 1_881) == (
        "kappa-ingest: 10 of ~1,000,000 (0%) rows acknowledged, 0 rows/s now, one-minute rate 1,881 (warming up)"
    )


def test_not_a_terminal_logs_every_ten_seconds(monkeypatch):
    clock = iter([0.0, 0.0, 5.0, 10.5, 21.0])  # the start, then one reading per update
    monkeypatch.setattr("kappa_ingest.report.progress.time.monotonic", lambda: next(clock))
    out = io.StringIO()
    p = Progress(None, stream=out)  # StringIO is not a TTY: log lines, no bar
    for rows in (100, 200, 300, 400):
        p.update(rows, 100.0, 90.0)
    lines = out.getvalue().splitlines()
    assert lines == [
        "kappa-ingest: 300 rows acknowledged, 100 rows/s now, one-minute rate 90 (warming up)",
        "kappa-ingest: 400 rows acknowledged, 100 rows/s now, one-minute rate 90 (warming up)",
    ]


@pytest.mark.parametrize("gz", [False, True])
def test_row_estimate_is_close(tmp_path, gz):
    path = datagen.generate("wide30", 50_000, tmp_path / "in.csv", gzip_output=gz)
    assert estimate_rows([str(path)], header=True) == pytest.approx(50_000, rel=0.05)
    assert estimate_rows(["hdfs:///x.csv"], header=True) is None


def test_row_estimate_of_many_files_reads_a_sample_of_them(tmp_path, monkeypatch):
    paths = [str(datagen.generate("debs2012", 200 + 10 * i, tmp_path / f"{i:03d}.csv", seed=i)) for i in range(100)]
    opened: list[str] = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: (opened.append(p), real_open(p, *a, **k))[1])
    assert estimate_rows(paths, header=True) == pytest.approx(sum(200 + 10 * i for i in range(100)), rel=0.05)
    assert len(opened) <= 16


def test_row_estimate_is_led_by_the_largest_files_not_by_empty_ones(tmp_path):
    big = datagen.generate("debs2012", 20_000, tmp_path / "big.csv", seed=1)
    small = [datagen.generate("wide30", 5, tmp_path / f"s{i:02d}.csv", seed=i) for i in range(16)]
    empty = [tmp_path / f"e{i:02d}.csv" for i in range(16)]
    for e in empty:
        e.write_bytes(b"")
    paths = [str(p) for p in (*small, big, *empty)]
    assert estimate_rows(paths, header=True) == pytest.approx(20_000 + 16 * 5, rel=0.05)
