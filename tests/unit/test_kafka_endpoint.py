"""Which Kafka a run uses, decided before Spark starts."""

from __future__ import annotations

import pytest

from kappa_ingest.errors import UsageError
from kappa_ingest.kafka.endpoint import endpoint_for


def test_configured_servers_are_used_as_given():
    endpoint = endpoint_for("k1:9092,k2:9092", "spark://m:7077")
    assert endpoint.servers() == "k1:9092,k2:9092" and not endpoint.embedded
    endpoint.close()


def test_a_cluster_master_without_servers_is_a_usage_error():
    with pytest.raises(UsageError, match="embedded broker runs only with a local master"):
        endpoint_for(None, "spark://m:7077")


def test_a_dry_run_asks_no_kafka():
    endpoint = endpoint_for(None, "local[2]", dry_run=True)
    assert not endpoint.embedded
    with pytest.raises(UsageError, match="no Kafka"):
        endpoint.servers()
