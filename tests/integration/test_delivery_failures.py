"""A record Kafka will not take fails its task with the cause named, and the run exits 4;
nothing is counted as sent that the broker did not acknowledge."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kappa_ingest import config
from kappa_ingest.errors import KafkaUnavailable
from kappa_ingest.ingest import ingest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("sink", ["confluent", "spark", "kafka-python"])
def test_broker_refusing_records_fails_the_run(spark, kafka, tmp_path, sink):
    topic = f"small-{sink}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    # The broker refuses any batch over 300 bytes; each of these records alone is larger.
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "300"})])[topic].result(30)
    path = tmp_path / "in.csv"
    path.write_text("id,text\n" + "".join(f"{i},{'x' * 400}\n" for i in range(20)))
    cfg = config.validate({"inputs": [str(path)], "topic": topic, "sink": sink, "metrics_dir": str(tmp_path / "m"),
                           "bootstrap_servers": kafka.bootstrap_servers})  # fmt: skip
    with pytest.raises(KafkaUnavailable) as failure:
        ingest(cfg, spark, echo=False)
    message = str(failure.value)
    assert "\n" not in message
    summary = json.loads((tmp_path / "m" / "runs" / cfg.run_id / "summary.json").read_text())
    assert summary["status"] == "failed"
    if "fewer new records" in message:
        # Spark's sink (4.0.0) and kafka-python can finish although the broker refused the
        # records (seen here, not every time); the broker-side offset check catches it.
        assert summary["broker"]["offset_delta"] == 0
        assert not next(c for c in summary["checks"] if c["name"].startswith("topic grew"))["ok"]
    else:
        # kafka-python names the broker's refusal only sometimes; it always counts it.
        words = ("too large", "too_large", "size") + (("not acknowledged",) if sink == "kafka-python" else ())
        assert any(w in message.lower() for w in words), message
        assert summary["rows_sent"] == 0 and summary["error"] == message
