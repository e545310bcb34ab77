"""Topics as asked for, on Kafka as users run it: a broker on Kafka's own defaults creates a
topic the moment a client names it in a metadata request (with its own partitions and
delete policy); no look-up of a run may do that. The ledger is one compacted partition
stamped by the broker, or the run is refused before anything is sent (exit 2, with the
command that fixes it)."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from helpers import consume_all, expected_rows, rows
from kappa_ingest import config, datagen
from kappa_ingest.errors import KafkaUnavailable, UsageError
from kappa_ingest.ingest import ingest
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.source import record_size

pytestmark = pytest.mark.integration
INTERNAL = {"__consumer_offsets", "__transaction_state"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = datagen.generate("wide30", 3_000, tmp_path_factory.mktemp("asked") / "in.csv", seed=5)
    return path, expected_rows(path)


def _topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics) - INTERNAL


def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer comes
    entries = admin.describe_configs([resource])[resource].result(10)
    return {k: v.value for k, v in entries.items()}


def _run(spark, kafka, tmp_path, path, topic: str, ledger_topic: str, **extra):
    cfg = config.validate({"inputs": [str(path)], "topic": topic, "bootstrap_servers": kafka.bootstrap_servers,
                           "metrics_dir": str(tmp_path / "m"), "ledger_topic": ledger_topic, "topic_partitions": 2,
                           "quiet": True, **extra})  # fmt: skip
    return ingest(cfg, spark, echo=False)


@pytest.mark.parametrize(("sink", "extra"), [("confluent", {"incremental": True}), ("kafka-python", {}),
                                             ("spark", {"dead_letter_topic": "asked-dlq"})])  # fmt: skip
def test_a_first_run_on_a_stock_broker_leaves_the_ledger_and_the_topic_as_asked(
    spark, kafka_stock, tmp_path, data, sink, extra
):
    path, expected = data
    bs = kafka_stock.bootstrap_servers
    before = _topics(bs)
    topic, ledger_topic = f"asked-{sink}", f"ledger-{sink}"
    report = _run(spark, kafka_stock, tmp_path, path, topic, ledger_topic, sink=sink, **extra)
    with Admin(bs) as admin:
        assert admin.describe(ledger_topic).partitions == 1
        assert admin.describe(topic).partitions == 2  # as asked, not the broker's 4
    ledger_config = _configs(bs, ledger_topic)
    assert ledger_config["cleanup.policy"] == "compact"
    assert ledger_config["message.timestamp.type"] == "LogAppendTime"
    made = _topics(bs) - before
    assert made == {topic, ledger_topic, *([extra["dead_letter_topic"]] if "dead_letter_topic" in extra else [])}
    assert rows(consume_all(bs, topic)) == expected
    # Each ledger record says its kind: the run's lock claim and its withdrawal, its entries.
    kinds = Counter(r.headers.get("kind") for r in consume_all(bs, ledger_topic, json_values=False))
    assert set(kinds) == {b"claim", b"entry"} and kinds[b"claim"] >= 2, kinds  # claimed, (renewed,) withdrawn
    assert kinds[b"entry"] == report.ledger["units"] == len(report.ledger["committed"]), kinds


@pytest.fixture(params=["stock", "hardened"])
def broker(request, kafka_stock, kafka):  # both named: the suite stops a shared broker after its last test
    return kafka_stock if request.param == "stock" else kafka


def test_a_ledger_of_several_partitions_is_refused_before_anything_is_sent(spark, broker, tmp_path, data):
    path, _ = data
    with Admin(broker.bootstrap_servers) as admin:
        admin.ensure_topic("ledger-4-parts", 4, 1, {"cleanup.policy": "compact"})
    with pytest.raises(UsageError, match=r"ledger topic 'ledger-4-parts' has 4 partitions.*needs exactly 1") as e:
        _run(spark, broker, tmp_path, path, "refused-parts", "ledger-4-parts")
    assert "kafka-topics.sh" in str(e.value) and "--partitions 1" in str(e.value) and e.value.exit_code == 2
    assert "refused-parts" not in _topics(broker.bootstrap_servers)  # nothing created, nothing sent


def test_a_ledger_that_deletes_is_refused_with_the_line_that_fixes_it(spark, broker, tmp_path, data):
    path, _ = data
    with Admin(broker.bootstrap_servers) as admin:
        admin.ensure_topic("ledger-deletes", 1, 1, {"cleanup.policy": "delete"})
    with pytest.raises(UsageError, match=r"ledger topic 'ledger-deletes' has cleanup.policy=delete") as e:
        _run(spark, broker, tmp_path, path, "refused-delete", "ledger-deletes")
    assert "kafka-configs.sh" in str(e.value) and "--add-config cleanup.policy=compact" in str(e.value)
    assert "refused-delete" not in _topics(broker.bootstrap_servers)


def test_a_ledger_without_the_brokers_clock_gets_it(spark, kafka, tmp_path, data):
    path, expected = data
    with Admin(kafka.bootstrap_servers) as admin:  # as an earlier version created it
        admin.ensure_topic("ledger-create-time", 1, 1, {"cleanup.policy": "compact"})
    _run(spark, kafka, tmp_path, path, "stamped", "ledger-create-time")
    assert _configs(kafka.bootstrap_servers, "ledger-create-time")["message.timestamp.type"] == "LogAppendTime"
    assert rows(consume_all(kafka.bootstrap_servers, "stamped")) == expected


def test_a_ledger_less_replicated_than_the_topic_is_refused(spark, kafka3, tmp_path, data):
    path, _ = data
    with Admin(kafka3.bootstrap_servers) as admin:
        admin.ensure_topic("replicated-data", 2, 3)
        admin.ensure_topic("ledger-one-copy", 1, 1, {"cleanup.policy": "compact"})
    with pytest.raises(UsageError, match=r"'ledger-one-copy' has 1 replica\(s\), fewer than the data topic's 3") as e:
        _run(spark, kafka3, tmp_path, path, "replicated-data", "ledger-one-copy")
    assert "kafka-reassign-partitions.sh" in str(e.value) and '"replicas":[1,2,3]' in str(e.value)


def test_a_ledger_the_broker_asked_did_not_know_yet_is_checked_all_the_same(kafka):
    """A ledger just made elsewhere, not yet known to the broker first asked (brokers learn
    of a new topic one by one: seen once in a 3-broker run, which then went unchecked): its
    creation finds it there, and it is checked as found."""
    from kappa_ingest.delivery import ledger

    class Lagging(Admin):
        def describe(self, topic, created=False):
            return None if not created else super().describe(topic, created)

    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic("ledger-lagging", 1, 1, {"cleanup.policy": "delete"})
    with Lagging(kafka.bootstrap_servers) as lagging, pytest.raises(UsageError, match=r"cleanup\.policy=delete"):
        ledger.ensure(lagging, "ledger-lagging")


def test_a_brokers_settings_are_asked_once_whatever_is_asked_of_them_and_by_how_many(kafka):
    """A run asks two (a created topic's limit, the transactions' timeout), two threads at
    once (one asks ahead): one DescribeConfigs answers both."""
    from concurrent.futures import ThreadPoolExecutor

    with Admin(kafka.bootstrap_servers) as admin:
        asked, describe = [], admin._configs

        def counted(kind, name):
            asked.append(name)
            return describe(kind, name)

        admin._configs = counted
        names = ["message.max.bytes", "transaction.max.timeout.ms", "message.max.bytes"]
        with ThreadPoolExecutor(3) as pool:
            values = list(pool.map(admin.broker_setting, names))
        assert len(asked) == 1
        assert values[0] == values[2] and int(values[0]) > 0 and int(values[1]) >= 60_000
        assert admin.broker_setting("no.such.setting") is None and len(asked) == 1


@pytest.fixture(scope="module")
def kafka_managed(tmp_path_factory):
    """A broker with a managed cluster's topic policy (tests/java: Confluent Cloud's words,
    max.message.bytes at most 8 MiB), the class built with javac against Kafka's own jar."""
    from kappa_ingest.kafka import broker as local_kafka

    out = tmp_path_factory.mktemp("policy")
    clients = sorted(local_kafka.jars_dir().glob("kafka-clients-*.jar"))[0]
    source = Path(__file__).parents[1] / "java" / "kappa" / "test" / "CappedMessageBytes.java"
    subprocess.run([shutil.which("javac"), "--release", "17", "-cp", str(clients), "-d", str(out), str(source)],
                   check=True, capture_output=True)  # fmt: skip
    cluster = local_kafka.start(tmp_path_factory.mktemp("kafka-managed"), brokers=1, plugins=(out,),
                                properties={"create.topic.policy.class.name": "kappa.test.CappedMessageBytes"})  # fmt: skip
    yield cluster
    cluster.stop()


def test_a_managed_cluster_that_refuses_the_room_gets_its_own_limit_and_every_row(spark, kafka_managed, tmp_path,
                                                                                 data):  # fmt: skip
    """A topic the run creates asks for room for 16 MiB batches; where the cluster's policy
    refuses that, the topic (and the dead-letter topic) gets 8 MiB, the batches follow it."""
    path, expected = data
    bs = kafka_managed.bootstrap_servers
    with Admin(bs) as admin, pytest.raises(KafkaUnavailable, match="exceeded max limit of 8388608"):
        admin.ensure_topic("too-roomy", 1, 1, {"max.message.bytes": str(record_size.BATCH_BYTES)})  # the policy holds
    report = _run(spark, kafka_managed, tmp_path, path, "managed", "managed-ledger", dead_letter_topic="managed-dlq")
    for topic in ("managed", "managed-dlq"):
        assert _configs(bs, topic)["max.message.bytes"] == str(record_size.MANAGED_ROOM)
    assert report.broker["batch_bytes"] == record_size.MANAGED_ROOM - record_size.FRAMING_BYTES
    assert rows(consume_all(bs, "managed")) == expected


def test_a_users_own_topic_config_the_cluster_refuses_fails_the_run_as_refused(spark, kafka_managed, tmp_path, data):
    """The user's max.message.bytes is not lowered behind their back: the run says the refusal."""
    path, _ = data
    with pytest.raises(KafkaUnavailable, match=r"refused to create topic 'asked-roomy'.*exceeded max limit"):
        _run(spark, kafka_managed, tmp_path, path, "asked-roomy", "roomy-ledger",
             topic_config={"max.message.bytes": str(record_size.BATCH_BYTES)})  # fmt: skip
    assert "asked-roomy" not in _topics(kafka_managed.bootstrap_servers)
