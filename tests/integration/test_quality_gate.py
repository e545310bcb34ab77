"""The data-quality gate with a real Great Expectations 1.x suite on Spark: a suite that
passes, one that fails and sends nothing, quarantine mode reconciling and agreeing with
GX's own counts, and a malformed suite refused by the CLI before Spark starts."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import high_watermarks, run
from kappa_ingest.errors import QualityGateFailed, UsageError
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.report import store as metrics_store

pytestmark = pytest.mark.integration

ROWS = [("id", "status", "amount")] + [
    (str(i), ["new", "paid", "shipped"][i % 3], f"{i * 1.5:.1f}") for i in range(300)
]
ROWS[1 + 41] = ("41", "lost", "61.5")  # not in the set
ROWS[1 + 77] = ("x77", "paid", "115.5")  # not an id
ROWS[1 + 78] = ("78", "", "117.0")  # no status: GX leaves nulls out of in_set


@pytest.fixture(scope="module")
def orders(tmp_path_factory):
    path = tmp_path_factory.mktemp("quality") / "orders.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(ROWS)
    return path


def suite(tmp_path: Path, *entries: tuple[str, dict]) -> str:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump([{"expectation": e, "kwargs": k} for e, k in entries]))
    return str(path)


ROW_LEVEL = [
    ("expect_column_values_to_not_be_null", {"column": "id"}),
    ("expect_column_values_to_match_regex", {"column": "id", "regex": "^[0-9]+$"}),
    ("expect_column_values_to_be_in_set", {"column": "status", "value_set": ["new", "paid", "shipped"]}),
]
ROW_COUNT = ("expect_table_row_count_to_be_between", {"min_value": 1, "max_value": 1000})


def test_a_suite_that_passes_sends_every_row_and_records_its_verdict(spark, kafka, tmp_path, orders):
    path = suite(tmp_path, ("expect_column_values_to_not_be_null", {"column": "id"}), ROW_COUNT,
                 ("expect_column_values_to_be_unique", {"column": "id"}))  # fmt: skip
    cfg, summary, records = run(spark, kafka, tmp_path, inputs=[str(orders)], expectations=path)
    q = summary["quality"]
    assert summary["status"] == "succeeded" and q["success"] and q["gate"] == "fail"
    assert [(r["type"], r["success"]) for r in q["expectations"]] == [
        ("expect_column_values_to_not_be_null", True),
        ("expect_table_row_count_to_be_between", True),
        ("expect_column_values_to_be_unique", True),
    ]
    assert q["expectations"][1]["observed"] == len(ROWS) - 1
    assert len(records) == summary["rows_sent"] == len(ROWS) - 1
    assert Path(q["data_docs"]).is_file() and "values must be unique" in Path(q["data_docs"]).read_text()
    rows = metrics_store.rows(cfg.metrics_dir, "quality", cfg.run_id, "index")
    assert [(r["index"], r["column"], r["success"]) for r in rows] == [
        (0, "id", True),
        (1, None, True),
        (2, "id", True),
    ]


def test_a_failing_suite_sends_nothing_and_names_each_failure(spark, kafka, tmp_path, orders):
    topic = f"t-{tmp_path.name}"
    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic(topic, 2, 1)
    before = high_watermarks(kafka.bootstrap_servers, topic)
    path = suite(tmp_path, *ROW_LEVEL, ROW_COUNT)
    with pytest.raises(
        QualityGateFailed, match=r"2 of 4 expectations .*expect_column_values_to_match_regex\(id\)"
    ) as e:
        run(spark, kafka, tmp_path, inputs=[str(orders)], expectations=path, topic=topic)
    assert e.value.exit_code == 5
    assert high_watermarks(kafka.bootstrap_servers, topic) == before  # nothing sent
    [report] = [json.loads(p.read_text()) for p in (tmp_path / "metrics" / "runs").glob("*/summary.json")]
    assert report["status"] == "failed" and report["rows_sent"] == 0
    failed = {r["label"]: r["observed"] for r in report["quality"]["expectations"] if not r["success"]}
    assert failed == {
        "expect_column_values_to_match_regex(id)": "1 of 300 rows unexpected",
        "expect_column_values_to_be_in_set(status)": "1 of 300 rows unexpected",
    }


@pytest.mark.parametrize("options", [{}, {"schema": "id STRING, status STRING, amount DOUBLE"}], ids=["lines", "typed"])
def test_quarantine_mode_takes_out_the_failing_rows_and_sends_the_rest(spark, kafka, tmp_path, orders, options):
    between = ("expect_column_values_to_be_between", {"column": "amount", "max_value": 400})
    path = suite(tmp_path, *ROW_LEVEL, ROW_COUNT, *([between] if options else []))
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(orders)], expectations=path,
                              quality_gate="quarantine", **options)  # fmt: skip
    bad_ids = {"41", "x77"} | ({str(i) for i in range(267, 300)} if options else set())  # amount > 400
    assert summary["status"] == "succeeded", summary["error"]
    assert summary["rows_read"] == summary["rows_sent"] + summary["rows_quarantined"] == len(ROWS) - 1
    assert sorted(r.value["data"]["id"] for r in records) == sorted(r[0] for r in ROWS[1:] if r[0] not in bad_ids)
    reasons = summary["quarantine"]["reasons"]
    assert reasons["failed expectation expect_column_values_to_match_regex(id)"] == 1
    assert reasons["failed expectation expect_column_values_to_be_in_set(status)"] == 1
    assert all(c["ok"] for c in summary["checks"]), summary["checks"]  # incl. each count against GX's
    assert any("Great Expectations' unexpected_count" in c["name"] for c in summary["checks"])


def test_quarantine_mode_still_fails_on_a_table_level_expectation(spark, kafka, tmp_path, orders):
    """A table-level expectation has no rows to take out: in quarantine mode its failure still
    gates the run (exit 5), and nothing is sent, not even the rows that pass."""
    topic = f"t-{tmp_path.name}"
    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic(topic, 2, 1)
    too_few = ("expect_table_row_count_to_be_between", {"min_value": 1000, "max_value": 2000})
    path = suite(tmp_path, *ROW_LEVEL, too_few)
    with pytest.raises(QualityGateFailed, match=r"expect_table_row_count_to_be_between") as e:
        run(spark, kafka, tmp_path, inputs=[str(orders)], expectations=path, quality_gate="quarantine", topic=topic)
    assert e.value.exit_code == 5
    assert sum(high_watermarks(kafka.bootstrap_servers, topic).values()) == 0
    [report] = [json.loads(p.read_text()) for p in (tmp_path / "metrics" / "runs").glob("*/summary.json")]
    assert report["status"] == "failed" and report["rows_sent"] == 0 and report["quality"]["gate"] == "quarantine"
    failed = [r["label"] for r in report["quality"]["expectations"] if not r["success"]]
    assert "expect_table_row_count_to_be_between" in failed[-1] and len(failed) == 3


def test_the_warn_gate_sends_every_row_and_reports_the_failures(spark, kafka, tmp_path, orders):
    path = suite(tmp_path, *ROW_LEVEL, ROW_COUNT)
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(orders)], expectations=path, quality_gate="warn")
    q = summary["quality"]
    assert summary["status"] == "succeeded" and q["gate"] == "warn" and not q["success"]
    assert len(records) == summary["rows_sent"] == len(ROWS) - 1 and summary["rows_quarantined"] == 0
    failed = {r["label"]: r["observed"] for r in q["expectations"] if not r["success"]}
    assert failed == {
        "expect_column_values_to_match_regex(id)": "1 of 300 rows unexpected",
        "expect_column_values_to_be_in_set(status)": "1 of 300 rows unexpected",
    }


def test_a_malformed_suite_is_exit_2_naming_the_bad_expectation(tmp_path, orders):
    path = suite(tmp_path, ("expect_column_values_to_not_be_null", {"column": "id"}),
                 ("expect_column_values_to_be_purple", {"column": "id"}))  # fmt: skip
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    done = subprocess.run([cli, "ingest", "--input", str(orders), "--topic", "q", "--expectations", path,
                           "--metrics-dir", str(tmp_path / "m")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "expectation #2 (expect_column_values_to_be_purple): no such expectation" in lines[0]


def test_a_suite_as_gx_writes_it_is_read_as_it_is(tmp_path):
    import great_expectations as gx

    from kappa_ingest import quality

    gx.get_context(mode="ephemeral")
    written = gx.ExpectationSuite(name="orders", expectations=[
        gx.expectations.ExpectColumnValuesToBeInSet(column="status", value_set=["new", "paid"]),
        gx.expectations.ExpectTableRowCountToBeBetween(min_value=1)])  # fmt: skip
    (tmp_path / "orders.json").write_text(json.dumps(written.to_json_dict()))
    loaded = quality.load(str(tmp_path / "orders.json"))
    assert loaded.name == "orders"
    assert [(e.type, e.row_level) for e in loaded.expectations] == [
        ("expect_column_values_to_be_in_set", True),
        ("expect_table_row_count_to_be_between", False),
    ]
    assert loaded.expectations[0].kwargs["value_set"] == ["new", "paid"]
    with pytest.raises(UsageError, match=r"expectation #1 \(expect_column_values_to_match_regex\): bad regex"):
        (tmp_path / "bad.yaml").write_text(
            '- {expectation: expect_column_values_to_match_regex, kwargs: {column: a, regex: "("}}'
        )
        quality.load(str(tmp_path / "bad.yaml"))
