"""One vocabulary for producer settings, translated per client."""

from __future__ import annotations

import re

import pytest

from kappa_ingest.errors import UsageError
from kappa_ingest.kafka import settings as ks

SETTINGS = {"acks": "all", "enable.idempotence": "true", "linger.ms": "20", "batch.size": "1048576",
            "compression.type": "lz4", "buffer.memory": "67108864", "max.request.size": "2097152"}  # fmt: skip


def test_librdkafka_names_and_types():
    conf = ks.for_confluent(SETTINGS, "h:1")
    assert conf == {"bootstrap.servers": "h:1", "partitioner": "murmur2_random", "allow.auto.create.topics": False, "acks": "all", "enable.idempotence": True, "linger.ms": 20,
                    "batch.size": 1048576, "compression.type": "lz4", "queue.buffering.max.kbytes": 65536,
                    "message.max.bytes": 2097152, "batch.num.messages": 1_000_000,
                    "queue.buffering.max.messages": 1_000_000}  # fmt: skip


def test_librdkafka_batches_are_bounded_by_batch_size_alone():
    """librdkafka ends a batch at 10,000 records and at message.max.bytes too: without
    max.request.size its request ceiling makes room for the batch; a given one stands."""
    big = ks.for_confluent({"batch.size": "8388608"}, "h:1")
    assert big["batch.num.messages"] == 1_000_000
    assert big["message.max.bytes"] == 8388608 + ks.REQUEST_FRAMING
    small = ks.for_confluent({"batch.size": "16384"}, "h:1")
    assert small["message.max.bytes"] == ks.REQUEST_MAX_DEFAULT
    given = ks.for_confluent({"batch.size": "8388608", "max.request.size": "300000"}, "h:1")
    assert given["message.max.bytes"] == 300_000


def test_kafka_python_names_and_types():
    conf = ks.for_kafka_python({**SETTINGS, "acks": "1", "compression.type": "none"}, "h:1,h:2")
    assert conf == {"bootstrap_servers": ["h:1", "h:2"], "allow_auto_create_topics": False, "acks": 1, "enable_idempotence": True, "linger_ms": 20,
                    "batch_size": 1048576, "compression_type": None, "buffer_memory": 67108864,
                    "max_request_size": 2097152}  # fmt: skip


def test_spark_gets_java_names_the_interceptor_and_a_jaas_line():
    opts = ks.for_spark({"acks": "all", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "app",
                         "sasl.password": 'p"w'}, "h:1", "r1")  # fmt: skip
    assert opts["kafka.acks"] == "all" and opts["kafka.bootstrap.servers"] == "h:1"
    assert opts["kafka.client.id"] == "kappa-ingest-r1"
    assert opts["kafka.interceptor.classes"] == "kappa.ingest.TimestampFromHeader"
    assert opts["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="app" password="p\\"w";'
    )
    assert "kafka.sasl.username" not in opts


def test_each_spark_run_gets_a_producer_of_its_own_unless_the_user_names_the_client():
    # Spark caches producers by their options: a per-run client.id keeps one run's stuck
    # records (KAFKA-19479) from holding up the next run's flush.
    assert ks.for_spark({}, "h:1", "r1") != ks.for_spark({}, "h:1", "r2")
    assert ks.for_spark({"client.id": "etl"}, "h:1", "r1")["kafka.client.id"] == "etl"


def test_a_setting_a_client_cannot_honour_is_refused_with_the_accepted_list():
    with pytest.raises(UsageError, match=r"not supported by the confluent sink; accepted: acks, .*linger\.ms"):
        ks.validate_settings({"partitioner.class": "x.Y"}, "confluent")
    ks.validate_settings({"partitioner.class": "x.Y"}, "spark")  # Java names pass through to Spark


def test_bad_values_are_refused():
    with pytest.raises(UsageError, match=re.escape("linger.ms='soon'")):
        ks.validate_settings({"linger.ms": "soon"}, "kafka-python")
    with pytest.raises(UsageError, match=re.escape("enable.idempotence")):
        ks.validate_settings({"enable.idempotence": "yes"}, "confluent")


@pytest.mark.parametrize("sink", ["spark", "confluent", "kafka-python"])
@pytest.mark.parametrize(
    ("setting", "accepted"),
    [
        ("compression.type=lz5", "none, gzip, snappy, lz4, zstd"),
        ("acks=2", "all, -1, 0, 1"),
        ("linger.ms=-5", "zero or a positive"),
        ("security.protocol=SASL_TLS", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ("sasl.mechanism=SCRAM-SHA-1", "SCRAM-SHA-512"),
    ],
)
def test_a_bad_value_is_a_usage_error_before_anything_is_created(sink, setting, accepted):
    from kappa_ingest import config

    name, _, value = setting.partition("=")
    with pytest.raises(UsageError, match=re.escape(f"--kafka-opt {name}={value!r}") + ".*" + re.escape(accepted)):
        config.validate({"inputs": ["a.csv"], "topic": "t", "sink": sink, "kafka_opts": {name: value}})
