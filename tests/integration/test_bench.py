"""The benchmark machinery runs end to end on a small input (the real figures come from
`make bench`, `make sweep` and `make scaling`, never from tests)."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import run
from kappa_ingest import datagen, local_kafka
from kappa_ingest.bench.runner import run_bench
from kappa_ingest.bench.sweep import run_sweep
from kappa_ingest.broker_rate import BrokerRateSampler
from kappa_ingest.topics import Admin

pytestmark = pytest.mark.integration


def test_bench_writes_table_json_and_chart(tmp_path):
    out = run_bench(["wide30"], [20_000], ["ceiling", "classic", "kappa-ingest confluent exactly-once",
                                           "kappa-ingest confluent at-least-once"], 1, tmp_path / "out",
                    tmp_path / "data", 5_000, 2, "test")  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    names = {r["contestant"] for r in results["summary"]}
    assert names == {"ceiling: ProducerPerformance", "classic script", "kappa-ingest confluent exactly-once",
                     "kappa-ingest confluent at-least-once"}  # fmt: skip
    eos, alo = (
        next(r for r in results["summary"] if r["contestant"].endswith(m)) for m in ("exactly-once", "at-least-once")
    )
    assert eos["x_at_least_once"] == round(eos["rows_per_s"] / alo["rows_per_s"], 3) and alo["x_at_least_once"] is None
    for r in results["runs"]:
        assert r["broker_rows"] >= r["rows"] > 0 and r["rows_per_s"] > 0 and r["peak_rss_mb"] > 0
        assert r["row_set"] == 20_000 and r["wall_s"] >= r["ingest_s"] > 0
    kappa = eos
    assert kappa["x_ceiling"] > 0 and kappa["x_classic"] > 0
    assert (out / "rows_per_s.png").stat().st_size > 10_000
    kappa_run = next(r for r in results["runs"] if r["contestant"] == "kappa-ingest confluent exactly-once")
    assert kappa["command_to_exit_s"] == kappa_run["wall_s"]
    assert "| wide30 | 20,000 | kappa-ingest confluent exactly-once | 20,000 |" in (out / "results.md").read_text()


def test_sweep_corner_writes_heatmap_and_rates(tmp_path):
    out = run_sweep(20_000, tmp_path / "out", tmp_path / "data", quick=True)
    result = json.loads((out / "sweep.json").read_text())
    assert len(result["cells"]) == 2 and len(result["rates"]) == 2
    assert all(c["rows"] == 20_000 and c["rows_per_s"] > 0 for c in result["cells"])
    assert result["recommended"]["fastest"]["rows_per_s"] == max(c["rows_per_s"] for c in result["cells"])
    assert (out / "heatmap.png").exists() and (out / "configured_vs_achieved.png").exists()


@pytest.mark.parametrize("sink", ["confluent", "spark"])
def test_target_rate_throttles_the_job(spark, kafka, tmp_path, sink):
    path = datagen.generate("wide30", 40_000, tmp_path / "in.csv")
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], target_rate=5000, partitions=2, sink=sink)
    assert len(records) == 40_000
    # 40,000 rows at 5,000 rows/s take 8 s; unthrottled this takes about one. The broker sees
    # the throttled rate; the run's own rate also counts the Python workers' start.
    assert summary["broker"]["rate"]["steady_messages_per_s"] == pytest.approx(5000, rel=0.15)
    assert 2500 < summary["rows_per_s"] < 5000 * 1.05


def test_sampler_agrees_with_producer_performance(kafka, tmp_path):
    admin = Admin(kafka.bootstrap_servers)
    admin.ensure_topic("pp-sampled", 2, 1)
    sampler = BrokerRateSampler(kafka.bootstrap_servers, "pp-sampled").start()
    done = subprocess.run(
        ["java", "-cp", f"{local_kafka.jars_dir()}/*", "org.apache.kafka.tools.ProducerPerformance",
         "--topic", "pp-sampled", "--num-records", "600000", "--record-size", "200", "--throughput", "20000",
         "--producer-props", f"bootstrap.servers={kafka.bootstrap_servers}", "acks=all", "linger.ms=5"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    points = sampler.stop()
    admin.close()
    assert done.returncode == 0, done.stderr[-500:]
    pp_rate = float(done.stdout.strip().splitlines()[-1].split(" records/sec")[0].split(", ")[-1])
    base = points[0]["offsets_total"]
    assert points[-1]["offsets_total"] - base == 600_000
    # Samples are a second apart: the first sample showing growth and the first showing the
    # total bracket the ~30 s of sending to within a second at each end.
    first = next(i for i, p in enumerate(points) if p["offsets_total"] > base)
    last = next(i for i, p in enumerate(points) if p["offsets_total"] == base + 600_000)
    sampled_rate = 600_000 / (last - first)
    assert sampled_rate == pytest.approx(pp_rate, rel=0.05)
