"""The Delta metrics store, `kappa-ingest report`, the HTML page and the notebook, all on
the metrics of real runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import consume_all, run
from kappa_ingest import config, datagen, metrics_store, plots
from kappa_ingest.errors import KappaError
from kappa_ingest.ingest import ingest
from kappa_ingest.report_html import render_html
from kappa_ingest.splits import Plan

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(spark, kafka, tmp_path_factory):
    """Two real runs (one good, one failed) in one metrics directory."""
    tmp = tmp_path_factory.mktemp("store")
    path = datagen.generate("wide30", 5000, tmp / "in.csv")
    _, summary, _ = run(spark, kafka, tmp, inputs=[str(path)], partitions=2, topic="store-ok")
    bad = config.validate({"inputs": [str(path)], "topic": "store-bad", "bootstrap_servers": kafka.bootstrap_servers,
                           "metrics_dir": str(tmp / "metrics"), "key_column": "nope"})  # fmt: skip
    with pytest.raises(KappaError):
        ingest(bad, spark, echo=False)
    return tmp / "metrics", summary, bad.run_id


def test_every_table_holds_the_run_keyed_by_run_id(store):
    metrics, summary, failed_id = store
    rid = summary["run_id"]
    runs = {r["run_id"]: r for r in metrics_store.rows(metrics, "runs")}
    assert runs[rid]["status"] == "succeeded" and runs[rid]["rows_sent"] == 5000
    assert runs[failed_id]["status"] == "failed" and "nope" in runs[failed_id]["error"]
    # The totals row carries the same clock as summary.json: phases adding up to wall_s.
    assert runs[rid]["wall_s"] == summary["wall_s"]
    assert [runs[rid][p] for p in metrics_store.PHASES] == [summary["phases"][p] for p in metrics_store.PHASES]
    for name in metrics_store.RUN_TABLES:
        assert metrics_store.read(metrics, name).schema == metrics_store.TABLES[name]
    tasks = metrics_store.rows(metrics, "tasks", rid)
    assert sum(t["rows"] for t in tasks if t["status"] == "SUCCESS") == 5000
    samples = metrics_store.rows(metrics, "broker_rate", rid, order_by="t")
    # The sampler's curve spans the records and their transactions' commit markers.
    assert samples[-1]["offsets_total"] - samples[0]["offsets_total"] == summary["broker"]["offset_delta"] > 5000
    assert len(metrics_store.rows(metrics, "executors", rid)) == 1
    # The ledger's readable copy: the run's units, their rows adding up to what it sent.
    units = metrics_store.rows(metrics, "ledger", rid)
    assert sum(u["rows_sent"] for u in units) == 5000 and {u["topic"] for u in units} == {"store-ok"}
    planned = Plan.from_json(summary["plan"]).units()
    assert {(u["file"], u["split_start"], u["part"]) for u in units} == {(u.file, u.start, u.part) for u in planned}


def test_spark_reads_the_store_as_deltalake_does(spark, store):
    """Written by delta-rs, read by delta-spark: the same rows and columns (two tables: every
    column type of the store is in them, and each Delta load costs Spark seconds)."""
    metrics, _, _ = store
    for name in ("runs", "tasks"):
        df = spark.read.format("delta").load(metrics_store.table_path(metrics, name))
        assert df.schema.fieldNames() == metrics_store.TABLES[name].names
        key = [c for c in ("run_id", "task_id", "stage_id", "t", "executor_id") if c in df.columns]
        by_spark = sorted((tuple(r) for r in df.select(*key).collect()), key=str)
        by_rs = sorted((tuple(r[k] for k in key) for r in metrics_store.rows(metrics, name)), key=str)
        assert [tuple(str(v)[:19] for v in r) for r in by_spark] == [tuple(str(v)[:19] for v in r) for r in by_rs]
    totals = spark.read.format("delta").load(metrics_store.table_path(metrics, "runs")).collect()
    assert {r["run_id"]: r["rows_sent"] for r in totals} == {
        r["run_id"]: r["rows_sent"] for r in metrics_store.rows(metrics, "runs")
    }


def test_an_older_table_gains_new_columns_on_append(tmp_path, store):
    """A store written before a column existed takes the new column on the next run's append."""
    import pyarrow as pa
    from deltalake import write_deltalake

    _, summary, _ = store
    old = pa.schema([f for f in metrics_store.RUNS if f.name not in metrics_store.PHASES])
    write_deltalake(metrics_store.table_path(tmp_path, "runs"), pa.Table.from_pylist([{"run_id": "old"}], old))
    metrics_store.record_run(tmp_path, summary)
    rows = {r["run_id"]: r for r in metrics_store.rows(tmp_path, "runs")}
    assert rows["old"]["setup_s"] is None and rows[summary["run_id"]]["setup_s"] == summary["phases"]["setup_s"]


def test_stage_and_task_times_lie_inside_the_run(store):
    metrics, summary, _ = store
    run_row = metrics_store.run(metrics, summary["run_id"])
    start, end = run_row["runs"][0]["started_at"], run_row["runs"][0]["finished_at"]
    for s in run_row["stages"]:
        assert start <= s["submitted_at"] <= s["completed_at"] <= end
    for t in run_row["tasks"]:
        assert start <= t["launched_at"] <= end
    # No task is missing: every task Spark counted in the sending stages has its row.
    sending = [s for s in run_row["stages"] if s["sends"]]
    ok = [t for t in run_row["tasks"] if t["status"] == "SUCCESS"]
    assert len(ok) == sum(s["num_tasks"] for s in sending) == 2
    assert len(run_row["tasks"]) == len(summary["tasks"])


def test_html_page_is_self_contained_with_figures(store):
    metrics, summary, _ = store
    page = render_html(metrics_store.run(metrics, summary["run_id"]))
    assert page.count("data:image/png;base64,") == 3 and "<script" not in page and "http" not in page
    assert summary["run_id"] in page and "Executors" in page


def test_report_page_reads_at_a_glance_in_chromium(store):
    """The pages of a real run and of a failed one, in headless Chromium at a laptop's 1300 px
    (page_view.check_run_page); the screenshots are kept in build/test-artifacts/."""
    import page_view

    metrics, summary, failed_id = store
    page_view.check_run_page(metrics_store.run(metrics, failed_id), figures=0)
    seen = page_view.check_run_page(metrics_store.run(metrics, summary["run_id"]), figures=3)
    # Two tasks side by side on the one local executor: two lanes, not one.
    assert sorted(plots.slots(metrics_store.run(metrics, summary["run_id"])["tasks"])) == [0, 1]
    # The first screen of the good run answers: how many rows, how long, how fast, all checks.
    rows, end_to_end, rate, checks = (t.lower() for t in seen.headline)
    assert rows.startswith(f"rows delivered {summary['rows_sent']:,} of {summary['rows_read']:,} read")
    assert end_to_end.startswith(f"end to end {summary['wall_s']:.1f} s")
    assert rate.startswith(f"sending rate {summary['rows_per_s']:,.0f} rows/s")
    assert checks.startswith(f"checks {len(summary['checks'])} of {len(summary['checks'])} hold")


def test_report_command_prints_runs_and_writes_html(store, tmp_path):
    metrics, summary, _ = store
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([cli, "report", "--metrics-dir", str(metrics), "--run-id", summary["run_id"],
                           "--html", str(tmp_path / "run.html")], capture_output=True, text=True, env=env, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert summary["run_id"] in done.stdout and "rows/s (sending)" in done.stdout and "  start-up" in done.stdout
    assert (tmp_path / "run.html").read_text().count("data:image/png;base64,") == 3


def test_notebook_runs_top_to_bottom_and_draws_every_figure(store, tmp_path):
    metrics, _, _ = store
    nb = nbformat.read(ROOT / "notebooks" / "ingest_rates.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    os.environ["KAPPA_METRICS_DIR"] = str(metrics)
    os.environ["KAPPA_BENCH_DIR"] = str(tmp_path / "no-bench")
    try:
        NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
    finally:
        os.environ.pop("KAPPA_METRICS_DIR")
        os.environ.pop("KAPPA_BENCH_DIR")
    images = [c for c in nb.cells if c.cell_type == "code" and any("image/png" in o.get("data", {}) for o in c.outputs)]
    assert len(images) == 4  # executors, timeline, broker curve, runs compared
    assert "no make bench results" in json.dumps([c.outputs for c in nb.cells if c.cell_type == "code"])


def test_two_executor_processes_report_their_own_rows(kafka, tmp_path):
    path = datagen.generate("wide30", 20_000, tmp_path / "in.csv")
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([cli, "ingest", "--input", str(path), "--topic", "two-executors", "--master",
                           "local-cluster[2,1,1024]", "--partitions", "4", "--bootstrap-servers", kafka.bootstrap_servers,
                           "--metrics-dir", str(tmp_path / "m"), "--run-id", "two"],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "m" / "runs" / "two" / "summary.json").read_text())
    executors = summary["executors"]
    assert len(executors) == 2 and all(e["rows"] > 0 for e in executors)
    assert sum(e["rows"] for e in executors) == summary["rows_sent"] == 20_000
    assert len(consume_all(kafka.bootstrap_servers, "two-executors")) == 20_000
