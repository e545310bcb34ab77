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
def spark():
    from kappa_ingest.metrics_store import SPARK_READER_CONF
    from kappa_ingest.spark_session import build_session

    session = build_session(
        "kappa-ingest tests",
        "local[2]",
        # The Delta reader too: the suite reads the metrics store with Spark as well as with deltalake.
        extra_conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g", **SPARK_READER_CONF},
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    from kappa_ingest import local_kafka

    cluster = local_kafka.start(tmp_path_factory.mktemp("kafka"), brokers=1)
    yield cluster
    cluster.stop()
