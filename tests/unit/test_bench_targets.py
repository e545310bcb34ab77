"""The bench's target checks: ratios taken from the same run, each against its bar."""

from pathlib import Path

from kappa_ingest.bench.contestants import BASELINE, PLAIN_LINE_PATH
from kappa_ingest.bench.runner import RunResult, checkout, checks, markdown, summarise


def _runs(name: str, kind: str, rates: list[float], exits: list[float], layout: str = "debs2012") -> list[RunResult]:
    return [RunResult(layout, 1_000_000, name, kind, i, 1_000_000, 1_000_000, 1e6 / rate, 5.0, wall, rate, 50.0, 500.0,
                      20.0, 3.0, 1500.0) for i, (rate, wall) in enumerate(zip(rates, exits, strict=True))]  # fmt: skip


def _found(found: list[dict], contestant: str, measure: str) -> dict:
    (hit,) = [c for c in found if c["contestant"] == contestant and c["measure"] == measure]
    return hit


def test_each_target_is_measured_against_its_own_contestants_in_the_same_run():
    ordered = f"{PLAIN_LINE_PATH} ordered by event time"
    typed = f"{PLAIN_LINE_PATH} typed"
    results = [
        *_runs("ceiling: ProducerPerformance", "ceiling", [100_000, 120_000, 110_000], [10, 10, 10]),
        *_runs("plain Spark", "baseline", [30_000, 30_000, 30_000], [30, 31, 32]),
        *_runs("plain Spark typed", "baseline", [20_000, 20_000, 20_000], [40, 40, 40]),
        *_runs("plain Spark ordered by event time", "baseline", [20_000, 20_000, 20_000], [40, 40, 40]),
        *_runs(PLAIN_LINE_PATH, "kappa-ingest", [120_000, 110_000, 130_000], [15, 16, 14]),
        *_runs(typed, "kappa-ingest", [100_000, 100_000, 100_000], [17, 17, 17]),
        *_runs(ordered, "kappa-ingest", [50_000, 60_000, 70_000], [21, 22, 20]),
        *_runs(BASELINE, "kappa-ingest", [118_000, 125_000, 140_000], [14, 15, 16]),
    ]
    found = checks(summarise(results))
    ceiling = _found(found, PLAIN_LINE_PATH, "x_ceiling")
    assert (ceiling["value"], ceiling["met"]) == (1.091, True)  # 120,000 / 110,000
    assert _found(found, typed, "x_versus")["value"] == 0.833  # 100,000 / 120,000: met (>= 0.8)
    assert _found(found, typed, "x_same_work")["value"] == 5.0  # 100,000 / plain Spark typed's 20,000
    assert _found(found, typed, "exit_vs_plain_spark")["value"] == 0.55  # 17 s / 31 s
    assert _found(found, ordered, "x_versus")["value"] == 0.5  # 60,000 / 120,000 < 0.6
    assert not _found(found, ordered, "x_versus")["met"]
    exit_ratio = _found(found, ordered, "exit_vs_versus")  # 21 s / 15 s = 1.4 > 1.3
    assert (exit_ratio["value"], exit_ratio["met"]) == (1.4, False)
    # Today's median against the baseline's slowest run (118,000) and longest exit (16 s).
    assert _found(found, BASELINE, "x_baseline_rate")["value"] == round(120_000 / 118_000, 3)
    assert _found(found, BASELINE, "x_baseline_exit")["value"] == round(15 / 16, 3)
    md = markdown(summarise(results), {"command": "bench", "started_at": "now", "machine": "2 cores"})
    assert f"| debs2012 | {ordered} | x_versus | ≥ 0.6 | 0.50 | **not met** |" in md


def test_a_target_whose_contestants_did_not_run_is_not_reported():
    results = _runs(PLAIN_LINE_PATH, "kappa-ingest", [120_000], [15])
    assert checks(summarise(results)) == []


def test_the_baseline_runs_with_its_own_commit_s_settings(tmp_path):
    """The baseline's package finds the conf/ingest.yaml of its commit, as today's finds
    today's: without it the baseline's producers ran on Kafka's defaults (no lz4)."""
    import subprocess
    import sys

    lib = checkout("HEAD", tmp_path / "baseline")
    found = subprocess.run(
        [sys.executable, "-c", "from kappa_ingest.config.command_line import default_config; print(default_config())"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(lib)}, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert found == str(tmp_path / "baseline" / "conf" / "ingest.yaml")
    assert "compression.type: lz4" in Path(found).read_text()
