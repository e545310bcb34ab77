"""Shared fixtures: one small Spark session and one real KRaft broker for the whole run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from kappa_ingest.report.store import SPARK_READER_CONF
    from kappa_ingest.spark.session import build_session

    session = build_session(
        "kappa-ingest tests",
        "local[2]",
        # The Delta reader too: the suite reads the metrics store with Spark as well as with deltalake.
        # The event log: the secrets test reads it for passwords.
        extra_conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g", **SPARK_READER_CONF,
                    "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(tmp_path_factory.mktemp("eventlog")),
                    "spark.eventLog.buffer.kb": "1k"},
    )  # fmt: skip
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    from kappa_ingest.kafka import broker as local_kafka

    cluster = local_kafka.start(tmp_path_factory.mktemp("kafka"), brokers=1, properties=KEEP_OLD_RECORDS)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka_stock(tmp_path_factory):
    """A broker on Kafka's own defaults, as a new user runs one: topics are created when a
    client first names them (auto.create.topics.enable), with 4 partitions here
    (num.partitions) so that a topic created so shows."""
    from kappa_ingest.kafka import broker as local_kafka

    cluster = local_kafka.start(tmp_path_factory.mktemp("kafka-stock"), brokers=1, stock=True,
                                properties={"num.partitions": "4"})  # fmt: skip
    yield cluster
    cluster.stop()


# Records timestamped by event time (2012 in the DEBS layout) are older than Kafka's default
# retention of 7 days: the broker would delete them, at its next retention check, before a test reads them.
KEEP_OLD_RECORDS = {"log.retention.ms": "-1"}
# A broker is declared dead after 4 s without heartbeats (Kafka's default: 9 s), so leaders move quickly.
FAST_FAILOVER = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500", **KEEP_OLD_RECORDS}


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory):
    """A real three-broker KRaft cluster (combined brokers and controllers, static voters),
    shared by the tests that need replication or kill brokers of it; stopped by PID."""
    from kappa_ingest.kafka import broker as local_kafka

    state = tmp_path_factory.mktemp("kafka3")
    cluster = ClusterHolder(local_kafka.start(state, brokers=3, properties=FAST_FAILOVER))
    yield cluster
    # Stopped together, the last brokers' controlled shutdown waits for a quorum that is gone
    # (up to the 30 s before SIGKILL): nothing of this cluster is kept, so wait 5 s at most.
    cluster.now.stop(timeout_s=5)
    if any(cluster.now.alive()) or local_kafka.status(state) is not None:
        raise RuntimeError(f"brokers of {state} outlived stop()")


class ClusterHolder:
    """The three-broker cluster as it is now: a test that kills brokers restarts them (heal)."""

    def __init__(self, cluster) -> None:
        self.now = cluster

    @property
    def bootstrap_servers(self) -> str:
        return self.now.bootstrap_servers

    def heal(self) -> None:
        import signal

        from kappa_ingest.kafka import broker as local_kafka

        for b in self.now.brokers:
            try:
                os.kill(b.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.now = local_kafka.restart(self.now)


@pytest.fixture
def cluster(kafka3):
    return Brokers(kafka3)


class Brokers:
    """The session's three-broker cluster, as the fault tests use it."""

    def __init__(self, holder) -> None:
        self.holder = holder

    @property
    def now(self):
        return self.holder.now

    @property
    def bootstrap_servers(self) -> str:
        return self.holder.bootstrap_servers

    def heal(self) -> None:
        self.holder.heal()

    def broker_leading(self, topic: str, partition: int = 0):
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap_servers}).list_topics(topic, timeout=10)
        leader = md.topics[topic].partitions[partition].leader
        return next(b for b in self.now.brokers if b.node_id == leader)

    def topic(self, name: str) -> str:
        """A topic on every broker, two of them in sync for a write to count (acks=all)."""
        from kappa_ingest.kafka.topics import Admin

        with Admin(self.bootstrap_servers) as admin:
            admin.ensure_topic(name, 3, 3, {"min.insync.replicas": "2"})
        return name
