"""The benchmark machinery runs end to end on a small input (the real figures come from
`make bench`, `make sweep` and `make scaling`, never from tests)."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import run
from kappa_ingest import datagen
from kappa_ingest.bench.runner import run_bench
from kappa_ingest.bench.sweep import run_sweep
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.report.broker_rate import BrokerRateSampler

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


def test_sweep_corner_writes_heatmap_and_rates(spark, tmp_path):
    out = run_sweep(20_000, tmp_path / "out", tmp_path / "data", quick=True, spark=spark)
    assert not spark.sparkContext._jsc.sc().isStopped()  # the shared session is left running
    result = json.loads((out / "sweep.json").read_text())
    assert len(result["cells"]) == 2 and len(result["rates"]) == 2
    assert all(c["rows"] == 20_000 and c["rows_per_s"] > 0 for c in result["cells"])
    assert result["recommended"]["fastest"]["rows_per_s"] == max(c["rows_per_s"] for c in result["cells"])
    assert (out / "heatmap.png").exists() and (out / "configured_vs_achieved.png").exists()


@pytest.mark.parametrize("sink", ["confluent", "spark"])
def test_target_rate_throttles_the_job(spark, kafka, tmp_path, sink):
    path = datagen.generate("wide30", 20_000, tmp_path / "in.csv")
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], target_rate=5000, partitions=2, sink=sink)
    assert len(records) == 20_000
    # A throttle bounds from above only (a slow machine may send slower, never faster):
    # 20,000 rows at 5,000 rows/s take at least 4 s, which unthrottled take well under one.
    assert summary["ingest_s"] >= 4 * 0.95, summary["ingest_s"]
    assert summary["rows_per_s"] <= 5000 * 1.05


def test_the_sampler_counts_every_record_and_its_rates_are_its_own_offsets_over_its_own_clock(kafka, tmp_path):
    from datetime import datetime

    admin = Admin(kafka.bootstrap_servers)
    admin.ensure_topic("pp-sampled", 2, 1)
    # Half a second apart: a rate that took a sample for a second would be off by 2x.
    sampler = BrokerRateSampler(kafka.bootstrap_servers, "pp-sampled", interval_s=0.5).start()
    done = subprocess.run(
        ["java", "-cp", f"{local_kafka.jars_dir()}/*", "org.apache.kafka.tools.ProducerPerformance",
         "--topic", "pp-sampled", "--num-records", "100000", "--record-size", "200", "--throughput", "20000",
         "--producer-props", f"bootstrap.servers={kafka.bootstrap_servers}", "acks=all", "linger.ms=5"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    points = sampler.stop()
    admin.close()
    assert done.returncode == 0, done.stderr[-500:]
    offsets = [p["offsets_total"] for p in points]
    assert offsets[-1] - offsets[0] == 100_000 and offsets == sorted(offsets)
    # Each rate is the growth of the end offsets over the time between its own two samples
    # (not a count of samples taken as seconds); together they account for every record.
    t = [datetime.fromisoformat(p["t"].replace("Z", "+00:00")).timestamp() for p in points]
    grew = [i for i in range(1, len(points)) if offsets[i] > offsets[i - 1]]
    assert len(grew) >= 6, points  # ~5 s of sending
    for i in grew:
        assert points[i]["messages_per_s"] == pytest.approx((offsets[i] - offsets[i - 1]) / (t[i] - t[i - 1]), rel=0.01)
    counted = sum(points[i]["messages_per_s"] * (t[i] - t[i - 1]) for i in grew)
    assert counted == pytest.approx(100_000, rel=0.01)
