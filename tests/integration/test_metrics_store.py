"""The Delta metrics store, `kappa-ingest report`, the HTML page and the notebook, all on
the metrics of real runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import consume_all, expected_rows, rows, run
from kappa_ingest import config, datagen
from kappa_ingest.delivery import ledger
from kappa_ingest.errors import KappaError
from kappa_ingest.ingest import ingest
from kappa_ingest.report import plots
from kappa_ingest.report import store as metrics_store
from kappa_ingest.report.html import render_html
from kappa_ingest.report.phases import parse_time
from kappa_ingest.source.splits import Plan

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(spark, kafka, tmp_path_factory):
    """Two real runs in one metrics directory: a failed one, then (the newest) a good one."""
    tmp = tmp_path_factory.mktemp("store")
    path = datagen.generate("wide30", 5000, tmp / "in.csv")
    bad = config.validate({"inputs": [str(path)], "topic": "store-bad", "bootstrap_servers": kafka.bootstrap_servers,
                           "metrics_dir": str(tmp / "metrics"), "key_column": "nope"})  # fmt: skip
    with pytest.raises(KappaError):
        ingest(bad, spark, echo=False)
    before = datetime.now(UTC)
    _, summary, _ = run(spark, kafka, tmp, inputs=[str(path)], partitions=2, topic="store-ok")
    Window.at = (before, datetime.now(UTC))
    return tmp / "metrics", summary, bad.run_id


class Window:
    """When the good run ran, by the test's own clock: the run's times lie inside it."""

    at: tuple[datetime, datetime]


def test_every_table_holds_the_run_keyed_by_run_id(store):
    metrics, summary, failed_id = store
    rid = summary["run_id"]
    runs = {r["run_id"]: r for r in metrics_store.rows(metrics, "runs")}
    assert runs[rid]["status"] == "succeeded" and runs[rid]["rows_sent"] == 5000
    assert runs[failed_id]["status"] == "failed" and "nope" in runs[failed_id]["error"]
    # The totals row's clock: the run's start and end inside the test's window around it, and
    # phases adding up to wall_s, the span between them.
    started, finished = (parse_time(runs[rid][k]) for k in ("started_at", "finished_at"))
    assert Window.at[0] - timedelta(milliseconds=1) <= started <= finished <= Window.at[1]  # the report's: ms
    assert runs[rid]["wall_s"] == pytest.approx((finished - started).total_seconds(), abs=0.002)
    assert sum(runs[rid][p] for p in metrics_store.PHASES) == pytest.approx(runs[rid]["wall_s"], abs=0.002)
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


def _plain(v):
    """A value as both readers can be compared on: a time as microseconds since the epoch
    (pyspark hands back naive local times, deltalake aware ones)."""
    return round(v.timestamp() * 1_000_000) if isinstance(v, datetime) else v


def _ordered(rows: list[dict], key: list[str]) -> list[dict]:
    return sorted(rows, key=lambda r: tuple(str(_plain(r[k])) for k in key))


def test_spark_reads_every_table_and_column_as_the_run_reported_them(spark, store):
    """Written by delta-rs, read by delta-spark: every table the run wrote, every column of
    it, equal to what the run reported (summary.json; the ledger's table equal to its entries
    as a consumer reads them from the ledger topic)."""
    metrics, summary, _ = store
    rid = summary["run_id"]
    reported = metrics_store.run_rows(summary)
    entries = ledger.read({"bootstrap.servers": summary["bootstrap_servers"]}, summary["delivery"]["ledger_topic"])
    reported["ledger"] = metrics_store.ledger_rows([e for e in entries if e.run_id == rid])
    for name, schema in metrics_store.TABLES.items():
        if name in ("bench", "watch_files"):  # written by make bench, and by a watch
            continue
        df = spark.read.format("delta").load(metrics_store.table_path(metrics, name))
        assert df.schema.fieldNames() == schema.names, name
        expected = metrics_store._table(schema, reported[name]).to_pylist()
        got = [r.asDict() for r in df.where(df.run_id == rid).collect()]
        assert len(got) == len(expected) and (got or name == "quality"), name  # no suite: no quality rows
        key = [c for c in ("t", "task_id", "stage_id", "attempt", "executor_id", "file", "split_start", "part")
               if c in schema.names]  # fmt: skip
        for want, row in zip(_ordered(expected, key), _ordered(got, key), strict=True):
            for column in schema.names:
                assert _plain(row[column]) == pytest.approx(_plain(want[column])), (name, column)


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


def test_a_runs_spark_metrics_are_its_job_groups_alone(spark):
    """Two groups' jobs in one session (as a watch's batches are): each collects its own
    stages and tasks, none of the other's."""
    from kappa_ingest.spark import metrics as spark_metrics

    sc = spark.sparkContext
    counts = {}
    for group, parts in (("metrics-group-a", 3), ("metrics-group-b", 2)):
        sc.setJobGroup(group, group)
        counts[group] = sc.parallelize(range(parts * 10), parts).map(lambda x: x + 1).count()
    sc.setLocalProperty("spark.jobGroup.id", None)  # the session's later jobs in no group, as before
    a, b = (spark_metrics.collect(spark, g) for g in ("metrics-group-a", "metrics-group-b"))
    assert counts == {"metrics-group-a": 30, "metrics-group-b": 20}
    assert [s.num_tasks for s in a.stages] == [3] and [s.num_tasks for s in b.stages] == [2]
    assert (
        len(a.tasks) == 3 and len(b.tasks) == 2 and not {s.stage_id for s in a.stages} & {s.stage_id for s in b.stages}
    )


def test_html_page_is_self_contained_with_figures(store):
    metrics, summary, _ = store
    page = render_html(metrics_store.run(metrics, summary["run_id"]))
    assert page.count("data:image/png;base64,") == 3 and "<script" not in page
    # Nothing fetched from elsewhere; the images' base64 is cut out first, since "http" can
    # turn up in it by chance (it did, once in a CI run).
    outside_images = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    assert "http" not in outside_images and 'src="//' not in outside_images
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


# Put into the notebook by the test alone: every figure the notebook shows, as data.
_RECORD_FIGURES = """
import kappa_ingest.report.plots as _plots
_drawn, _png = [], _plots.png
def _recorded(fig):
    axes = fig.axes[0]
    _drawn.append({"lines": [[float(y) for y in line.get_ydata()] for line in axes.lines],
                   "bars": [round(float(r.get_width()), 3) for r in axes.patches if r.get_width() and r.get_height() < 1]})
    return _png(fig)
_plots.png = _recorded
"""


def test_notebook_runs_top_to_bottom_and_draws_every_figure(store, tmp_path):
    """Executed as a user would, on a store whose newest run succeeded: each figure draws
    that run's values (the broker's samples, one bar per task and per executor, one per run)."""
    metrics, summary, _ = store
    nb = nbformat.read(ROOT / "notebooks" / "ingest_rates.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    nb.cells.insert(1, nbformat.v4.new_code_cell(_RECORD_FIGURES))
    nb.cells.append(nbformat.v4.new_code_cell("import json; print(json.dumps(_drawn))"))
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
    assert len(images) == 4  # broker curve, timeline, executors, runs compared
    printed = json.dumps([c.outputs for c in nb.cells if c.cell_type == "code"])
    assert "no make bench results" in printed and "no watch in" in printed  # test_watch runs the watch's cell
    broker, timeline, executors, compared = json.loads(nb.cells[-1].outputs[0]["text"])
    run_row = metrics_store.run(metrics, summary["run_id"])
    rates = [p["messages_per_s"] for p in metrics_store.rows(metrics, "broker_rate", summary["run_id"], order_by="t")]
    assert broker["lines"][0] == pytest.approx(rates) and max(rates) > 0
    durations = sorted(round(t["duration_s"], 3) for t in run_row["tasks"])
    assert sorted(timeline["bars"]) == pytest.approx(durations, abs=1e-3) and len(durations) == 2
    assert executors["bars"] == pytest.approx([round(e["rows_per_s"], 3) for e in run_row["executors"]], abs=1e-3)
    assert executors["bars"][0] > 0
    by_rate = sorted(round(r["rows_per_s"], 3) for r in metrics_store.last_runs(metrics, 50) if r["rows_per_s"])
    assert sorted(compared["bars"]) == pytest.approx(by_rate, abs=1e-3) and len(by_rate) == 1


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
    assert rows(consume_all(kafka.bootstrap_servers, "two-executors")) == expected_rows(path)
