"""The benchmark machinery runs end to end on a small input (the real figures come from
`make bench`, `make sweep` and `make scaling`, never from tests)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from confluent_kafka.admin import AdminClient

from faults import wait_for
from helpers import consume_all, expected_rows, rows, run
from kappa_ingest import datagen
from kappa_ingest.bench.runner import run_bench
from kappa_ingest.bench.sweep import run_sweep
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.report.broker_rate import BrokerRateSampler

pytestmark = pytest.mark.integration


def test_bench_writes_table_json_and_chart(kafka, tmp_path):
    """The machinery, on the session's broker and without a warm-up: each contestant's
    records are in its topic (read back), the files are written; the contestant reading
    from S3 reads the input's copy in a local S3 server the bench starts and stops. (Its
    numbers: make bench.)"""
    contestants = ["ceiling: ProducerPerformance", "kappa-ingest confluent exactly-once",
                   "kappa-ingest confluent exactly-once from S3"]  # fmt: skip
    out = run_bench(["wide30"], [20_000], contestants, 1, tmp_path / "out", tmp_path / "data", 5_000, 2, "test",
                    cluster=kafka, warm_up=False, keep_topics=True)  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert {r["contestant"] for r in results["summary"]} == set(contestants)
    topics = {t for t in AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(timeout=10).topics
              if t.startswith("bench-wide30-20000-")}  # fmt: skip
    for r in results["runs"]:
        name = re.escape(_topic_name(r["contestant"]))
        [topic] = [t for t in topics if re.fullmatch(rf"bench-wide30-20000-{name}-\d+-\d+", t)]
        records = consume_all(kafka.bootstrap_servers, topic, json_values=False)
        assert r["rows"] == len(records) and r["row_set"] == 20_000, (r, len(records))
        assert r["rows_per_s"] > 0 and r["peak_rss_mb"] > 0
    kappa = [r for r in results["runs"] if r["contestant"].startswith("kappa-ingest")]
    data = tmp_path / "data" / "wide30-20000.csv"
    for name, source in (("kappa-ingest-confluent-exactly-once-0-", f"file:{data}"),
                         ("kappa-ingest-confluent-exactly-once-from-S3-0-", "s3://bench/wide30-20000.csv")):  # fmt: skip
        [topic] = [t for t in topics if re.fullmatch(rf"bench-wide30-20000-{name}\d+", t)]
        records = consume_all(kafka.bootstrap_servers, topic)
        assert rows(records) == expected_rows(data) and {r.headers["source_file"] for r in records} == {source.encode()}
    assert [r["rows"] for r in kappa] == [20_000, 20_000]
    [s3_row] = [r for r in results["summary"] if r["contestant"].endswith("from S3")]
    assert s3_row["versus"] == "kappa-ingest confluent exactly-once" and s3_row["x_versus"] > 0
    assert (out / "rows_per_s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| wide30 | 20,000 | kappa-ingest confluent exactly-once | 20,000 |" in (out / "results.md").read_text()


def test_a_benchs_records_go_once_measured(kafka, tmp_path):
    """A bench of both layouts keeps 10+ GB of records unless each run's topic goes."""
    run_bench(["wide30"], [2_000], ["ceiling: ProducerPerformance"], 1, tmp_path / "out", tmp_path / "data", 500, 2,
              "test", cluster=kafka, warm_up=False)  # fmt: skip
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})

    def left() -> list[str]:  # the controller has accepted the deletion; metadata follows it
        return [t for t in admin.list_topics(timeout=10).topics if t.startswith("bench-wide30-2000-")]

    wait_for(lambda: not left(), 30, "the bench's topic deleted")


def _topic_name(contestant: str) -> str:
    """The part of its topic's name the bench gives a contestant (bench.runner.run_contestant)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", contestant.split(":")[0])


def test_sweep_corner_writes_heatmap_and_rates(spark, kafka, tmp_path):
    out = run_sweep(10_000, tmp_path / "out", tmp_path / "data", quick=True, spark=spark, cluster=kafka)
    assert not spark.sparkContext._jsc.sc().isStopped() and all(kafka.alive())  # the shared ones are left running
    result = json.loads((out / "sweep.json").read_text())
    assert len(result["cells"]) == 2 and len(result["rates"]) == 2
    assert all(c["rows"] == 10_000 and c["rows_per_s"] > 0 for c in result["cells"])
    assert result["recommended"]["fastest"]["rows_per_s"] == max(c["rows_per_s"] for c in result["cells"])
    assert (out / "heatmap.png").exists() and (out / "configured_vs_achieved.png").exists()


@pytest.mark.parametrize("sink", ["confluent", "spark"])
def test_a_throttled_job_sends_every_row(spark, kafka, tmp_path, sink):
    """--target-rate through each sink's task loop (the throttle's rate itself: tests/unit/test_pacing.py)."""
    path = datagen.generate("wide30", 10_000, tmp_path / "in.csv")
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], target_rate=5000, partitions=2, sink=sink)
    assert rows(records) == expected_rows(path) and summary["rows_sent"] == 10_000


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
    assert len(grew) >= 2, points  # the curve has points while records arrived
    for i in grew:
        assert points[i]["messages_per_s"] == pytest.approx((offsets[i] - offsets[i - 1]) / (t[i] - t[i - 1]), rel=0.01)


def test_a_halted_samplers_readings_lie_within_offsets_read_after_it_while_others_write(kafka):
    """A run reads its settled offsets after the sampler halts; other producers writing on
    must not put a reading of the sampler's own beyond them (a fresh clone's CI once failed
    "broker-side sampler's readings lie within the run's offsets" so: 2681..45513 against
    2279..45505, the sampler still reading after the run's offsets were read)."""
    import threading
    import time

    from confluent_kafka import Producer

    admin = Admin(kafka.bootstrap_servers)
    admin.ensure_topic("sampled-with-others", 2, 1)
    writing = threading.Event()

    def other_writer() -> None:
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 1})
        deadline, i = time.monotonic() + 90, 0
        while not writing.is_set() and time.monotonic() < deadline:  # until the test has seen it write on
            try:
                producer.produce("sampled-with-others", b"x" * 100)
            except BufferError:  # its queue full: let it drain
                producer.poll(0.1)
                continue
            i += 1
            if i % 100 == 0:
                producer.poll(0.005)
        producer.flush(10)

    thread = threading.Thread(target=other_writer)
    thread.start()
    try:
        sampler = BrokerRateSampler(kafka.bootstrap_servers, "sampled-with-others", interval_s=0.05).start()
        wait_for(lambda: len(sampler.readings) >= 5 and sampler.readings[-1] > sampler.readings[0], timeout_s=30,
                 what="the sampler to read the topic growing")  # fmt: skip
        sampler.halt()
        after = admin.end_offsets("sampled-with-others")
        kept = list(sampler.readings)
        wait_for(lambda: sum(admin.end_offsets("sampled-with-others").values()) > sum(after.values()) + 1000,
                 timeout_s=30, what="the other producer to write on")  # fmt: skip
        sampler.stop(last=after)
    finally:
        writing.set()
        thread.join(30)
        admin.close()
    assert sampler.readings == kept and max(kept) <= sum(after.values()), (kept[-3:], after)
