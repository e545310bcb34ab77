"""--incremental over a landing directory that grows between scheduled runs: every row
reaches the topic exactly once, a changed file is refused or re-sent as a new version,
and a run with nothing new ends without Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from helpers import consume_all, expected_rows, rows
from kappa_ingest import config, datagen
from kappa_ingest.errors import InputError
from kappa_ingest.ingest import ingest

pytestmark = pytest.mark.integration


def _run(spark, kafka, landing, metrics, topic, **options):
    cfg = config.validate({"inputs": [str(landing)], "topic": topic, "bootstrap_servers": kafka.bootstrap_servers,
                           "metrics_dir": str(metrics), "incremental": True, "quiet": True, **options})  # fmt: skip
    ingest(cfg, spark, echo=False)
    return json.loads((metrics / "runs" / cfg.run_id / "summary.json").read_text())


def _day(landing, name, n, seed, mtime_s):
    path = datagen.generate("debs2012", n, landing / name, seed=seed)
    os.utime(path, (mtime_s, mtime_s))  # oldest first is by modification time
    return path


def test_a_growing_landing_directory_reaches_the_topic_once(spark, kafka, tmp_path):
    landing, metrics, topic = tmp_path / "landing", tmp_path / "m", "landing-once"
    landing.mkdir()
    a = _day(landing, "day1-a.csv", 800, 1, 1_700_000_000)
    b = _day(landing, "day1-b.csv", 600, 2, 1_700_000_100)
    first = _run(spark, kafka, landing, metrics, topic)
    assert first["rows_sent"] == 1400 and first["incremental"]["files_new"] == 2
    c = _day(landing, "day2.csv", 700, 3, 1_700_086_400)
    second = _run(spark, kafka, landing, metrics, topic)
    assert second["rows_sent"] == 700
    assert second["incremental"]["files_new"] == 1 and second["incremental"]["files_delivered_before"] == 2
    assert second["plan"]["files"][0]["path"] == str(c) and len(second["plan"]["files"]) == 1
    third = _run(spark, kafka, landing, metrics, topic)
    assert third["status"] == "succeeded" and third["rows_sent"] == 0 and third["stages"] == []
    assert third["incremental"]["files_delivered_before"] == 3
    want = expected_rows(a) + expected_rows(b) + expected_rows(c)
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == want


def test_a_changed_file_is_refused_unless_resent_as_a_new_version(spark, kafka, tmp_path):
    landing, metrics, topic = tmp_path / "landing", tmp_path / "m", "landing-changed"
    landing.mkdir()
    path = _day(landing, "orders.csv", 300, 1, 1_700_000_000)
    _run(spark, kafka, landing, metrics, topic)
    old = expected_rows(path)
    last = path.read_text().splitlines()[-1]
    with open(path, "a") as f:  # appended to after it was delivered
        f.write(last + "\n")
    with pytest.raises(
        InputError, match=r"changed since they were delivered: .*orders\.csv \(size .*--on-changed resend"
    ):
        _run(spark, kafka, landing, metrics, topic)
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == old
    resent = _run(spark, kafka, landing, metrics, topic, on_changed="resend")
    assert resent["rows_sent"] == 301 and resent["incremental"]["files_changed_resent"] == [str(path)]
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == old + expected_rows(path)  # both versions
    assert _run(spark, kafka, landing, metrics, topic)["rows_sent"] == 0  # the new version is the delivered one


def test_max_files_and_max_bytes_drain_a_backlog_oldest_first(spark, kafka, tmp_path):
    landing, metrics, topic = tmp_path / "landing", tmp_path / "m", "landing-backlog"
    landing.mkdir()
    files = [_day(landing, f"f{i}.csv", 200, i, 1_700_000_000 + (5 - i) * 60) for i in range(5)]  # f4 oldest
    oldest_first = sorted(files, key=lambda p: p.stat().st_mtime)
    one = _run(spark, kafka, landing, metrics, topic, max_files=2)
    assert [f["path"] for f in one["plan"]["files"]] == [str(p) for p in oldest_first[:2]]
    assert one["incremental"]["files_left"] == 3
    size = oldest_first[2].stat().st_size
    two = _run(spark, kafka, landing, metrics, topic, max_bytes=str(size + size // 2))
    assert [f["path"] for f in two["plan"]["files"]] == [str(oldest_first[2])]
    three = _run(spark, kafka, landing, metrics, topic)
    assert three["incremental"]["files_left"] == 0 and three["rows_sent"] == 400
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == sum((expected_rows(p) for p in files), Counter())


def test_nothing_new_exits_0_without_starting_spark(kafka, tmp_path, spark):
    landing, metrics, topic = tmp_path / "landing", tmp_path / "m", "landing-nothing"
    landing.mkdir()
    _day(landing, "only.csv", 100, 1, 1_700_000_000)
    _run(spark, kafka, landing, metrics, topic)
    done = subprocess.run(
        [sys.executable, "-m", "kappa_ingest.cli", "ingest", "--input", str(landing), "--topic", topic,
         "--bootstrap-servers", kafka.bootstrap_servers, "--metrics-dir", str(metrics), "--incremental",
         "--run-id", "nothing-new", "--quiet"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sent 0 rows: all 1 input files are already delivered to landing-nothing" in done.stdout
    report = json.loads((metrics / "runs" / "nothing-new" / "summary.json").read_text())
    assert report["status"] == "succeeded" and report["rows_sent"] == 0 and report["spark_master"] is None
