"""`./spark-submit.sh ... jobs/ingest_csv.py ...`: the cluster entry point, run for real
with a local master, passing spark-submit options through."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers import consume_all, csv_rows
from kappa_ingest import datagen

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_spark_submit_runs_the_job(kafka, tmp_path):
    path = datagen.generate("wide30", 2000, tmp_path / "in.csv")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--master", "local[2]", "--conf", "spark.ui.port=4050",
         str(ROOT / "jobs" / "ingest_csv.py"), "--input", str(path), "--topic", "submitted",
         "--bootstrap-servers", kafka.bootstrap_servers, "--metrics-dir", str(tmp_path / "m"), "--sink", "spark"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [summary_file] = (tmp_path / "m" / "runs").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["spark_master"] == "local[2]" and summary["status"] == "succeeded"
    records = consume_all(kafka.bootstrap_servers, "submitted")
    _, expected, _ = csv_rows(path)
    assert len(records) == summary["rows_sent"] == len(expected) == 2000
    assert {r.value["data"]["id"] for r in records} == {row["id"] for row in expected}
