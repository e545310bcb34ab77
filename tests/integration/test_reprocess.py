"""Kappa replay: a topic's history, chosen from the ledger, into a new topic version shaped
like the old one; each key's records in event-time order; paced by event time."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource

from helpers import consume_all, expected_rows, rows
from kappa_ingest import config, reprocess
from kappa_ingest.ingest import ingest
from kappa_ingest.kafka.retention import past_retention
from kappa_ingest.kafka.topics import Admin

pytestmark = pytest.mark.integration
# Recent: a topic's retention (7 days here) deletes records by their timestamps, the event times,
# so history dated before it could vanish before the test reads it back.
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)


def write_day(path, day: int, rows: int, seed: int) -> list[dict]:
    """Orders of one day, their event times shuffled within the file: order must be made."""
    rng = random.Random(seed)
    out = [{"order_id": f"{day}-{i}", "customer": f"c{rng.randrange(7)}",
            "ts": (T0 + timedelta(days=day, seconds=rng.randrange(3600))).strftime("%Y-%m-%dT%H:%M:%S.000Z")}
           for i in range(rows)]  # fmt: skip
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, ["order_id", "customer", "ts"])
        w.writeheader()
        w.writerows(out)
    return out


def summary(tmp_path, run_id: str) -> dict:
    return json.loads((tmp_path / "m" / "runs" / run_id / "summary.json").read_text())


@pytest.fixture(scope="module")
def history(spark, kafka, tmp_path_factory):
    """orders, as scheduled runs delivered it: day 0 by one run, days 1 and 2 by another,
    into a 3-partition topic with a retention of its own; day 2's file deleted since."""
    tmp = tmp_path_factory.mktemp("replay")
    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic("orders", 3, 1, {"retention.ms": "604800000", "cleanup.policy": "delete"})
    days = [write_day(tmp / f"day{d}.csv", d, 400, d) for d in range(3)]
    base = {"topic": "orders", "bootstrap_servers": kafka.bootstrap_servers, "metrics_dir": str(tmp / "m"),
            "key_column": "customer", "event_time_column": "ts", "quiet": True}  # fmt: skip
    ingest(config.validate({**base, "inputs": [str(tmp / "day0.csv")], "run_id": "day0"}), spark, echo=False)
    ingest(config.validate({**base, "inputs": [str(tmp / "day1.csv"), str(tmp / "day2.csv")], "run_id": "day12"}),
           spark, echo=False)  # fmt: skip
    (tmp / "day2.csv").unlink()
    return tmp, days


def replay(spark, kafka, tmp, **values):
    v = {"bootstrap_servers": kafka.bootstrap_servers, "metrics_dir": str(tmp / "m"), "from_topic": "orders",
         "key_column": "customer", "event_time_column": "ts", "quiet": True, **values}  # fmt: skip
    v, chosen = reprocess.prepare(v, sized_on_command_line=False)
    return ingest(config.validate(v), spark, echo=False, replay=chosen)


def test_a_replay_into_a_new_version_keeps_each_keys_history_in_event_time_order(kafka, history):
    """``kappa-ingest reprocess`` as a user types it: each record's Kafka timestamp is its
    row's event time, and each key's records reach their partition in that order."""
    from kafka.partitioner.default import murmur2

    tmp, days = history
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    done = subprocess.run(
        [cli, "reprocess", "--from-topic", "orders", "--runs", "day0,day12", "--to-topic", "orders.v2",
         "--order-by-event-time", "--key-column", "customer", "--event-time-column", "ts", "--quiet",
         "--bootstrap-servers", kafka.bootstrap_servers, "--metrics-dir", str(tmp / "m"), "--run-id", "to-v2",
         "--master", "local[2]"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with Admin(kafka.bootstrap_servers) as admin:
        md = admin.client.list_topics("orders.v2", timeout=10).topics["orders.v2"]
        resource = ConfigResource(ConfigResource.Type.TOPIC, "orders.v2")
        configs = admin.client.describe_configs([resource])[resource].result(10)
    assert len(md.partitions) == 3 and configs["retention.ms"].value == "604800000"  # shaped like orders

    records = consume_all(kafka.bootstrap_servers, "orders.v2")
    sent = sorted(r.value["data"]["order_id"] for r in records)
    assert sent == sorted(o["order_id"] for o in days[0] + days[1])  # day 2's file is gone: not re-sent
    event_ms = {o["order_id"]: round(datetime.fromisoformat(o["ts"]).timestamp() * 1000) for o in days[0] + days[1]}
    assert all(r.timestamp_ms == event_ms[r.value["data"]["order_id"]] for r in records)  # the row's event time
    by_key = defaultdict(list)
    for r in sorted(records, key=lambda r: r.partition):  # stable: offset order within a partition
        assert r.partition == (murmur2(r.key) & 0x7FFFFFFF) % 3
        by_key[r.key].append(r.timestamp_ms)
    assert all(ts == sorted(ts) for ts in by_key.values())  # each key's history in event-time order
    assert len(by_key) == 7 and all(len(set(ts)) > 1 for ts in by_key.values())

    s = summary(tmp, "to-v2")
    r = s["reprocess"]
    assert s["status"] == "succeeded" and all(c["ok"] for c in s["checks"]), s["checks"]
    assert r["selected_by"] == "runs" and r["runs"] == ["day0", "day12"] and r["files"] == 2
    [gone] = r["not_resent"]
    assert gone["file"].endswith("day2.csv") and gone["rows"] == 400 and "no longer exists" in gone["reason"]
    old, new = r["compare"]["old"], r["compare"]["new"]
    assert old["records"] == 1200 and new["records"] == 800
    assert new["first_event"] == min(o["ts"] for o in days[0] + days[1])
    assert new["last_event"] == max(o["ts"] for o in days[0] + days[1])
    assert "retention_warning" not in r  # three days old: within the topic's seven


def test_a_replay_whose_oldest_event_is_past_the_new_topics_retention_is_warned(kafka):
    """The decision against a real broker's topic configs: the broker deletes by timestamp."""
    now = round(datetime.now(UTC).timestamp() * 1000)
    old, recent = "2012-02-22T10:00:00.000Z", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic("kept-7-days", 1, 1, {"retention.ms": "604800000"})
        admin.ensure_topic("kept-forever", 1, 1, {"retention.ms": "-1"})
        admin.ensure_topic("stamped-on-arrival", 1, 1, {"retention.ms": "604800000",
                                                        "message.timestamp.type": "LogAppendTime"})  # fmt: skip
        warned = past_retention(admin, "kept-7-days", old, now)
        assert warned is not None and "604,800,000 ms (7 days)" in warned and old in warned
        assert "--entity-name kept-7-days --add-config retention.ms=-1" in warned
        assert past_retention(admin, "kept-7-days", recent, now) is None
        assert past_retention(admin, "kept-forever", old, now) is None
        assert past_retention(admin, "stamped-on-arrival", old, now) is None
        assert past_retention(admin, "kept-7-days", None, now) is None  # nothing replayed


def test_an_ingest_whose_oldest_event_is_past_the_topics_retention_is_warned(spark, kafka, tmp_path, capsys):
    """``ingest --event-time-column`` of old rows into a topic of Kafka's default seven days:
    the run succeeds and says that the broker is about to delete its oldest records."""
    from kappa_ingest.report.run import render

    path = tmp_path / "old.csv"
    now = datetime.now(UTC)
    stamps = [now - timedelta(days=30), now - timedelta(days=2), now - timedelta(hours=1)]
    path.write_text("id,ts\n" + "".join(f"{i},{t:%Y-%m-%dT%H:%M:%S}.000Z\n" for i, t in enumerate(stamps)))
    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic("ingest-kept-7-days", 1, 1, {"retention.ms": "604800000"})
    cfg = config.validate({"inputs": [str(path)], "topic": "ingest-kept-7-days", "event_time_column": "ts",
                           "bootstrap_servers": kafka.bootstrap_servers, "metrics_dir": str(tmp_path / "m")})  # fmt: skip
    report = ingest(cfg, spark, echo=False).summary()  # (read back, the records may be gone: not read)
    warned = report["broker"]["retention_warning"]
    assert report["status"] == "succeeded" and report["rows_sent"] == 3
    assert "ingest-kept-7-days keeps records for retention.ms 604,800,000 ms (7 days)" in warned, warned
    assert f"the oldest {stamps[0]:%Y-%m-%dT%H:%M:%S}.000Z" in warned, warned
    assert f"  warning: {warned}" in render(report).splitlines()
    assert f"kappa-ingest: warning: {warned}" in capsys.readouterr().err


def test_a_replay_by_delivery_time_paced_by_event_time(spark, kafka, history, tmp_path):
    tmp, _ = history
    one = tmp_path / "burst.csv"
    with open(one, "w", newline="") as f:  # 40 orders over 4 s of event time
        w = csv.writer(f)
        w.writerow(["order_id", "customer", "ts"])
        w.writerows(
            [
                (
                    f"b{i}",
                    f"c{i % 3}",
                    (T0 + timedelta(milliseconds=100 * i)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                )
                for i in range(40)
            ]
        )
    replay(spark, kafka, tmp, inputs=[str(one)], topic="orders.paced", replay_speed="2", run_id="paced")
    s = summary(tmp, "paced")
    assert s["status"] == "succeeded" and s["rows_sent"] == 40 and s["reprocess"]["selected_by"] == "input"
    # The pacing itself, record by record against its clock: tests/unit/test_pacing.py.
    assert rows(consume_all(kafka.bootstrap_servers, "orders.paced")) == expected_rows(one)


def test_nothing_to_replay_is_exit_3_naming_the_selection(kafka, history):
    from kappa_ingest.errors import InputError

    tmp, _ = history
    with pytest.raises(InputError, match="nothing to replay: no delivered file to orders matches --runs nope"):
        replay(None, kafka, tmp, runs="nope", topic="orders.v3")
    with pytest.raises(InputError, match=r"--since 2030-01-01"):
        replay(None, kafka, tmp, since="2030-01-01", topic="orders.v3")
