"""A record Kafka will not take fails the run with exit 4 and one line, and the report
never claims as sent what the topic does not hold."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from helpers import consume_all
from kappa_ingest import config
from kappa_ingest.errors import KafkaUnavailable
from kappa_ingest.ingest import ingest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("sink", ["confluent", "spark", "kafka-python"])
def test_broker_refusing_records_fails_the_run_and_claims_nothing(spark, kafka, tmp_path, sink):
    topic = f"refusing-{sink}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    # The broker refuses every batch: its records' event times lie more than an hour before
    # the broker's clock (Kafka 4 says INVALID_RECORD, older brokers INVALID_TIMESTAMP). (A
    # record over the topic's size limit no longer gets that far: it is quarantined, see
    # test_hostile_inputs.)
    hour = {"message.timestamp.before.max.ms": "3600000"}
    admin.create_topics([NewTopic(topic, 1, 1, config=hour)])[topic].result(30)
    path = tmp_path / "in.csv"
    path.write_text("id,ts\n" + "".join(f"{i},2020-01-01T00:00:{i:02d}.000Z\n" for i in range(20)))
    # Java's producer may retry a refused batch's split parts until delivery.timeout.ms (KAFKA-19479).
    quick = {"request.timeout.ms": "5000", "delivery.timeout.ms": "10000"}
    cfg = config.validate({"inputs": [str(path)], "topic": topic, "sink": sink, "metrics_dir": str(tmp_path / "m"),
                           "bootstrap_servers": kafka.bootstrap_servers, "kafka_opts": quick,
                           "event_time_column": "ts"})  # fmt: skip
    with pytest.raises(KafkaUnavailable) as failure:
        ingest(cfg, spark, echo=False)
    message = str(failure.value)
    assert "\n" not in message and "Kafka" in message, message
    if sink != "spark":  # the line says why and what to change (Spark's sink: Java's own text)
        assert "message.timestamp.before.max.ms" in message and "--event-time-column" in message, message
    summary = json.loads((tmp_path / "m" / "runs" / cfg.run_id / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == message
    assert consume_all(kafka.bootstrap_servers, topic) == []
    # A sink may notice the refusal (nothing counted as sent) or not (Spark's writer can finish
    # a task whose records the broker refused: its flush() returns early, KAFKA-19479); then the
    # broker-side check must fail the run.
    unverified = [c for c in summary["checks"] if not c["ok"]]
    assert summary["rows_sent"] == 0 or unverified, summary["checks"]
