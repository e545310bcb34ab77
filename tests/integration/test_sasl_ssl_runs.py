"""The job against a secured Kafka: SASL_SSL, SCRAM-SHA-512, a CA made for the run, ACLs.

Every sink sends through it with settings in Kafka's Java names (the password given as
``${NAME}``), the topic is read back record by record, and the password is looked for in
everything the run printed or wrote and in every process's command line while it ran. A
wrong password and missing ACLs end as one line each, exit 4."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import csv_rows
from kappa_ingest import config, datagen
from kappa_ingest.config.choices import DEFAULT_LEDGER_TOPIC as DEFAULT_TOPIC
from kappa_ingest.errors import KafkaUnavailable
from kappa_ingest.ingest import ingest
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka import security as kafka_security
from kappa_ingest.preflight import preflight
from kappa_ingest.report import store as metrics_store

pytestmark = pytest.mark.integration
LEDGER = DEFAULT_TOPIC


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    cluster = local_kafka.start(tmp_path_factory.mktemp("sasl"), security="sasl_ssl",
                                users={"nowrite": "nowrite-password-1", "nocreate": "nocreate-password-1"})  # fmt: skip
    try:
        kafka_security.grant(cluster, "app", "TOPIC", "sec-", ("WRITE", "DESCRIBE", "CREATE", "READ"), prefixed=True)
        kafka_security.grant(cluster, "app", "TOPIC", LEDGER, ("WRITE", "DESCRIBE", "CREATE", "READ"))
        kafka_security.grant(cluster, "app", "TRANSACTIONAL_ID", "kappa-ingest.", ("WRITE", "DESCRIBE"), prefixed=True)
        kafka_security.grant(cluster, "app", "CLUSTER", "kafka-cluster", ("IDEMPOTENT_WRITE",))
        for user in ("app", "nowrite", "nocreate"):  # the ledger's and the read-back's consumer groups
            kafka_security.grant(cluster, user, "GROUP", "kappa-ingest-", ("READ", "DESCRIBE"), prefixed=True)
        for user in ("nowrite", "nocreate"):
            kafka_security.grant(cluster, user, "TOPIC", LEDGER, ("WRITE", "DESCRIBE", "READ"))
        kafka_security.grant(cluster, "nowrite", "TOPIC", "sec-", ("DESCRIBE",), prefixed=True)
        yield cluster
    finally:
        cluster.stop()


def _settings(cluster, user: str, password_ref: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": password_ref, "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(cluster.ca_file)}  # fmt: skip


def _cfg(cluster, tmp_path, sink: str, user: str = "app", password_ref: str = "${KI_KAFKA_PASSWORD}", **more):
    return config.validate({"inputs": [str(tmp_path / "in.csv")], "topic": f"sec-{sink}", "sink": sink,
                            "run_id": f"sec-{sink}-{time.time_ns()}", "bootstrap_servers": cluster.bootstrap_servers,
                            "metrics_dir": str(tmp_path / "metrics"), "kafka_opts": _settings(cluster, user, password_ref),
                            **more})  # fmt: skip


class CommandLines:
    """Every process's command line, sampled while a run goes on."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stop.is_set():
            out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False).stdout
            self.seen.update(out.splitlines())
            self.stop.wait(0.2)

    def __enter__(self) -> CommandLines:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.parametrize("sink", ["confluent", "kafka-python", "spark"])
def test_every_sink_over_sasl_ssl_and_no_secret_anywhere(secure, spark, tmp_path, monkeypatch, capfd, sink):
    password = kafka_security.password(secure, "app")
    monkeypatch.setenv("KI_KAFKA_PASSWORD", password)
    path = datagen.generate("wide30", 3000, tmp_path / "in.csv")
    cfg = _cfg(secure, tmp_path, sink, partitions=2)
    with CommandLines() as ps:
        ingest(cfg, spark, echo=True)
    out, err = capfd.readouterr()
    summary_file = tmp_path / "metrics" / "runs" / cfg.run_id / "summary.json"
    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "succeeded" and summary["rows_sent"] == 3000, summary["error"]
    assert all(c["ok"] for c in summary["checks"]), summary["checks"]
    assert any(c["name"].startswith("broker-side sampler") for c in summary["checks"])  # it sampled over SASL_SSL
    assert summary["config"]["kafka_opts"]["sasl.password"] == "${KI_KAFKA_PASSWORD}"

    # read back as the admin, over SASL_SSL, record by record
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka_security.confluent_settings(secure, "admin"), "group.id": "check",
                         "isolation.level": "read_committed", "enable.partition.eof": True})  # fmt: skip
    parts = consumer.list_topics(cfg.topic, timeout=10).topics[cfg.topic].partitions
    consumer.assign([TopicPartition(cfg.topic, p, 0) for p in parts])
    got, eof, deadline = [], set(), time.monotonic() + 60
    while len(eof) < len(parts) and time.monotonic() < deadline:
        for m in consumer.consume(1000, timeout=0.2):
            if m.error():
                eof.add(m.partition())
            else:
                got.append(json.loads(m.value())["data"])
    consumer.close()
    _, expected, _ = csv_rows(path)
    canon = sorted(json.dumps(r, sort_keys=True) for r in got)
    assert canon == sorted(json.dumps(r, sort_keys=True) for r in expected)

    # the password, anywhere a person or a process could see it
    from kappa_ingest.report import html as report_html
    from kappa_ingest.report.store import RUN_TABLES, table_path

    places = {"stdout": out, "stderr": err, "summary.json": summary_file.read_text(),
              "ps": "\n".join(ps.seen),
              "html": report_html.render_html(metrics_store.run(tmp_path / "metrics", cfg.run_id))}  # fmt: skip
    for table in RUN_TABLES:
        if Path(table_path(tmp_path / "metrics", table)).exists():
            places[f"delta {table}"] = metrics_store.read(tmp_path / "metrics", table).to_string()
    app = spark.sparkContext.applicationId
    ui = spark.sparkContext.uiWebUrl
    for page in ("environment", "sql?details=true&planDescription=true"):
        with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/{page}", timeout=10) as r:
            places[f"Spark UI {page}"] = r.read().decode()
    log_dir = Path(spark.conf.get("spark.eventLog.dir").removeprefix("file:"))
    places["Spark event log"] = "".join(p.read_text(errors="replace") for p in log_dir.rglob("*") if p.is_file())
    assert "PLAINTEXT" not in out  # the run named the secured cluster, not another
    leaked = [where for where, text in places.items() if password in text]
    assert not leaked, f"the password appears in {leaked}"
    assert [where for where, text in places.items() if not text and where != "stderr"] == []  # each place looked at


@pytest.mark.parametrize("sink", ["confluent", "kafka-python", "spark"])
def test_a_wrong_password_is_exit_4_naming_authentication(secure, spark, tmp_path, sink):
    datagen.generate("wide30", 10, tmp_path / "in.csv")
    cfg = _cfg(secure, tmp_path, sink, password_ref="not-the-password")
    with pytest.raises(KafkaUnavailable, match="refused authentication") as caught:
        preflight(cfg)
    assert caught.value.exit_code == 4 and "\n" not in str(caught.value)
    with pytest.raises(KafkaUnavailable, match="refused authentication") as caught:  # the job, past the pre-flight
        ingest(cfg, spark, echo=False)
    assert caught.value.exit_code == 4 and "\n" not in str(caught.value)


def test_missing_acls_name_the_topic_and_the_operation(secure, spark, tmp_path):
    datagen.generate("wide30", 10, tmp_path / "in.csv")
    admin = kafka_security.admin_client(secure)
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic("sec-readonly", 1, 1)])["sec-readonly"].result(30)
    no_write = _cfg(secure, tmp_path, "confluent", user="nowrite", password_ref="nowrite-password-1",
                    topic="sec-readonly")  # fmt: skip
    with pytest.raises(KafkaUnavailable, match=r"may not write to topic 'sec-readonly' \(Kafka ACL: no WRITE"):
        ingest(no_write, spark, echo=False)
    no_create = _cfg(secure, tmp_path, "confluent", user="nocreate", password_ref="nocreate-password-1",
                     topic="sec-absent")  # fmt: skip
    with pytest.raises(KafkaUnavailable, match=r"'sec-absent' does not exist .* must be created by an admin"):
        ingest(no_create, spark, echo=False)
