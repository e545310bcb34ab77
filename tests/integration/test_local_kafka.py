"""The embedded Kafka: a real KRaft cluster from the cached jars, stopped by PID."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from helpers import consume_all
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka.topics import Admin

pytestmark = pytest.mark.integration


def test_three_brokers_form_one_cluster_with_replication(kafka3):
    """The session's three-broker cluster (its fixture stops it by PID and checks they are gone)."""
    cluster = kafka3.now
    assert all(cluster.alive()) and len(cluster.bootstrap_servers.split(",")) == 3
    with Admin(cluster.bootstrap_servers) as admin:
        assert admin.check_reachable() == 3
        assert admin.ensure_topic("replicated", 2, 3)
        md = admin.client.list_topics("replicated", timeout=10).topics["replicated"]
        assert all(len(p.replicas) == 3 for p in md.partitions.values())
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        for i in range(100):
            p.produce("replicated", str(i).encode())
        assert p.flush(30) == 0
        assert sorted(r.value for r in consume_all(cluster.bootstrap_servers, "replicated")) == list(range(100))
        assert sum(admin.end_offsets("replicated").values()) == 100
    assert local_kafka.status(cluster.state_dir) is not None


def test_cli_start_status_stop(tmp_path):
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    state = str(tmp_path / "state")
    env = {**os.environ}
    started = subprocess.run(
        [cli, "kafka", "start", "--dir", state], capture_output=True, text=True, env=env, timeout=120
    )
    try:
        assert started.returncode == 0, started.stderr
        assert "local Kafka running at 127.0.0.1:" in started.stdout
        status = subprocess.run([cli, "kafka", "status", "--dir", state], capture_output=True, text=True, timeout=30)
        assert status.returncode == 0 and "[True]" in status.stdout
        again = subprocess.run([cli, "kafka", "start", "--dir", state], capture_output=True, text=True, timeout=60)
        assert again.returncode == 2 and "already running" in again.stderr
    finally:
        stopped = subprocess.run([cli, "kafka", "stop", "--dir", state], capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    status = subprocess.run([cli, "kafka", "status", "--dir", state], capture_output=True, text=True, timeout=30)
    assert status.returncode == 1 and "no local Kafka" in status.stdout


def test_a_storage_format_that_fails_says_its_exception_and_starts_nothing(tmp_path):
    with pytest.raises(local_kafka.KafkaUnavailable) as failed:
        local_kafka.start(tmp_path / "k", brokers=2, properties={"log.retention.ms": "not-a-number"})
    said = str(failed.value)
    # The exception's own line, not the stack frame Java prints last.
    assert "formatting broker-1 storage failed" in said and "not-a-number" in said, said
    assert "StorageTool.main" not in said and str(tmp_path / "k" / "broker-1" / "logs" / "format.log") in said
    assert local_kafka.status(tmp_path / "k") is None
