"""The embedded Kafka secured: SASL_SSL with SCRAM-SHA-512 users, a fresh CA, ACLs.

One broker for the whole module; every command line it was started with is recorded, to
show that no password (nor a SCRAM salted password) ever reached one.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import ssl
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer

from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka import security as kafka_security
from kappa_ingest.kafka.broker import LocalKafka

pytestmark = pytest.mark.integration

TOPIC = "secure-orders"
GROUP = "secure-readers"


@dataclass
class Secured:
    cluster: LocalKafka  # as it is now: the restart test replaces it
    passwords: dict[str, str]  # every user's, and the keystore's under "keystore"
    command_lines: list[list[str]]  # of every process start() ran


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    state = tmp_path_factory.mktemp("secure-kafka")
    command_lines: list[list[str]] = []

    class RecordingPopen(subprocess.Popen):  # subprocess.run goes through Popen too
        def __init__(self, args, *more, **kwargs):
            command_lines.append([str(a) for a in args])
            super().__init__(args, *more, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess, "Popen", RecordingPopen)
        # "reader" may read the topic, not write it.
        cluster = local_kafka.start(state, security="sasl_ssl", users={"reader": secrets.token_urlsafe(16)})
    held = Secured(cluster, {}, command_lines)
    try:
        held.passwords = {p.stem: p.read_text() for p in cluster.secrets_dir.glob("*.password")}
        props = (state / "broker-1" / "server.properties").read_text()
        held.passwords["keystore"] = next(
            line.split("=", 1)[1] for line in props.splitlines() if line.startswith("ssl.keystore.password=")
        )
        yield held
    finally:
        held.cluster.stop()
    assert not any(held.cluster.alive()) and local_kafka.status(state) is None


def _kafka_python(cluster: LocalKafka, user: str, password: str) -> dict:
    return {
        "bootstrap_servers": cluster.bootstrap_servers,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        "ssl_cafile": str(cluster.ca_file),
    }


def _consume(settings: dict, count: int, group: str = GROUP, timeout_s: float = 30) -> list[bytes]:
    consumer = Consumer({**settings, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def _consume_kafka_python(settings: dict, count: int, timeout_s: float = 30) -> list[bytes]:
    consumer = KafkaConsumer(TOPIC, auto_offset_reset="earliest", **settings)  # no group: all partitions
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < count and time.monotonic() < deadline:
            values += [m.value for batch in consumer.poll(timeout_ms=500).values() for m in batch]
    finally:
        consumer.close()
    return values


def test_app_writes_and_reads_with_confluent_kafka_and_kafka_python(secured):
    cluster, app = secured.cluster, kafka_security.APP
    kafka_security.grant_producer(cluster, app, TOPIC)
    kafka_security.grant_consumer(cluster, app, TOPIC, GROUP)
    kafka_security.grant_consumer(cluster, "reader", TOPIC, GROUP)
    settings = kafka_security.confluent_settings(cluster, app)
    # app creates the topic itself: its CREATE ACL at work.
    admin = AdminClient(settings)  # held: a client collected mid-request cancels it
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    producer = Producer(settings)
    for i in range(5):
        producer.produce(TOPIC, f"confluent-{i}".encode())
    assert producer.flush(30) == 0
    kp = KafkaProducer(**_kafka_python(cluster, app, secured.passwords[app]))
    for i in range(5):
        kp.send(TOPIC, f"kafka-python-{i}".encode())
    kp.flush(30)
    kp.close()
    expected = sorted([f"confluent-{i}".encode() for i in range(5)] + [f"kafka-python-{i}".encode() for i in range(5)])
    assert sorted(_consume(settings, 10)) == expected
    assert sorted(_consume_kafka_python(_kafka_python(cluster, app, secured.passwords[app]), 10)) == expected
    java = kafka_security.client_settings(cluster, app)
    assert java["security.protocol"] == "SASL_SSL" and java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["ssl.truststore.type"] == "PEM" and java["ssl.truststore.location"] == str(cluster.ca_file)


def test_wrong_password_is_refused_as_an_authentication_error(secured):
    errors: list[KafkaError] = []
    settings = {**kafka_security.confluent_settings(secured.cluster, "app"), "sasl.password": "not-the-password"}
    producer = Producer({**settings, "error_cb": errors.append})  # connects at once
    for _ in range(600):  # until the client reports why it is refused (a bound for a hang, not a speed)
        if errors:
            break
        producer.poll(0.1)
    assert [e.code() for e in errors[:1]] == [KafkaError._AUTHENTICATION]


def test_user_without_write_acl_is_refused(secured):
    """User "reader" may read the topic, not write it (DESCRIBE granted here, READ in the first test)."""
    cluster = secured.cluster
    kafka_security.grant(cluster, "reader", "TOPIC", TOPIC, ["DESCRIBE"])
    admin = kafka_security.admin_client(cluster)
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].exception(timeout=30)  # if the first test did not
    reports: list[KafkaError | None] = []
    producer = Producer(kafka_security.confluent_settings(cluster, "reader"))
    producer.produce(TOPIC, b"forbidden", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(30)
    assert [e.code() if e else None for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_no_password_on_a_command_line_in_the_logs_or_on_disk(secured):
    cluster, passwords = secured.cluster, secured.passwords
    assert set(passwords) == {"admin", "app", "reader", "keystore"}
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    started = "\n".join(" ".join(argv) for argv in secured.command_lines)
    assert "kafka.Kafka" in started and "@" in started  # the broker, and StorageTool's argument file
    for text in (running, started):
        assert not [user for user, pw in passwords.items() if pw in text]
    assert "saltedpassword" not in started
    node = cluster.state_dir / "broker-1"
    for f in [*(node / "logs").rglob("*"), *(node / "data").rglob("*")]:
        if f.is_file():
            content = f.read_bytes()
            assert not [user for user, pw in passwords.items() if pw.encode() in content], f
    assert not (node / "format.args").exists()
    # server.properties must hold what the broker itself needs: admin's password (the JAAS
    # line of its inter-broker client) and the keystore's, so only its owner may read it.
    props = node / "server.properties"
    text = props.read_text()
    assert [line.split("=", 1)[0] for line in text.splitlines() if passwords["admin"] in line] == [
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"
    ]
    assert passwords["app"] not in text and passwords["reader"] not in text
    private = [props, cluster.ca_file.parent / "broker.p12", *cluster.secrets_dir.iterdir()]
    assert {f.name: _mode(f) for f in private} == {f.name: 0o600 for f in private}
    assert _mode(cluster.secrets_dir) == 0o700


def _mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


def test_controller_listener_takes_only_the_brokers_certificate(secured):
    """Over PLAINTEXT it would answer anyone, as a super user (see kafka_security)."""
    port = secured.cluster.brokers[0].controller_port
    assert not _api_versions_answered(socket.create_connection(("127.0.0.1", port), timeout=5))
    context = ssl.create_default_context(cafile=str(secured.cluster.ca_file))  # trusted, but no certificate
    assert not _api_versions_answered(
        context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="127.0.0.1")
    )


def _api_versions_answered(sock: socket.socket) -> bool:
    """Send ApiVersions v0 as an anonymous client: did a Kafka response come back?"""
    client_id = b"probe"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    with sock:
        try:
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = sock.recv(8)
        except (ssl.SSLError, OSError):  # refused handshake, reset, or silence until the timeout
            return False
    return len(head) == 8 and struct.unpack(">i", head[4:])[0] == 7


def test_status_reads_the_security_back(secured):
    cluster = local_kafka.status(secured.cluster.state_dir)
    assert cluster == secured.cluster and cluster.ca_file.name == "ca.pem"


def test_restart_keeps_users_certificate_and_data(secured):
    """A stopped broker comes back on its own files (last: it changes the fixture's broker).
    Stopped cleanly: after a SIGKILL, the new broker waits ~9 s for the old one's session to end."""
    before = secured.cluster
    os.kill(before.brokers[0].pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while any(before.alive()) and time.monotonic() < deadline:
        time.sleep(0.05)
    secured.cluster = local_kafka.restart(before)
    assert secured.cluster.brokers[0].pid != before.brokers[0].pid and secured.cluster.ca_file == before.ca_file
    kafka_security.grant(secured.cluster, "app", "GROUP", "after-restart", ["READ"])
    assert len(_consume(kafka_security.confluent_settings(secured.cluster, "app"), 10, "after-restart")) == 10
