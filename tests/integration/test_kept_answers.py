"""Runs one after another on the same resources (a watch's batches) keep what Kafka answered
the first and ask only what can have changed: a real broker changes it between runs (a
producer of its own, partitions added, the topic deleted) and each run still sends every
row once and says how it knows."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from helpers import consume_all, expected_rows, rows
from kappa_ingest import config, datagen
from kappa_ingest.ingest import run
from kappa_ingest.pipeline.resources import RunResources
from kappa_ingest.report.phases import RunClock


def test_runs_on_kept_answers_see_what_changed_between_them(spark, kafka, tmp_path):
    topic, bootstrap = "kept-answers", kafka.bootstrap_servers
    files = [datagen.generate("debs2012", 400, tmp_path / f"f{i}.csv", seed=i) for i in range(5)]
    base = {"topic": topic, "bootstrap_servers": bootstrap, "metrics_dir": str(tmp_path / "metrics"),
            "delivery": "exactly-once", "topic_partitions": 2, "quiet": True}  # fmt: skip

    def cfg(i: int):
        return config.validate({**base, "inputs": [str(files[i])], "run_id": f"kept-{i}"})

    admin = AdminClient({"bootstrap.servers": bootstrap})
    with RunResources(cfg(0), spark) as resources:
        first = run(cfg(0), resources, RunClock(), echo=False)
        kept = resources.kept()
        setup = kept.setup
        assert first.broker["topic_created"] and setup is not None and setup.topics.partitions == 2

        # Nothing changed: the set-up is taken as it was, the offsets vouch for the run.
        second = run(cfg(1), resources, RunClock(), echo=False)
        assert kept.setup is setup and "topic_created" not in second.broker
        assert second.delivery["verified_by"] == "offsets", second.delivery

        # A producer of its own wrote between two runs: the next run, whose "before" is the
        # last run's reading, counts it as another writer and reads the topic back.
        other = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        other.produce(topic, b'{"data": {"not": "ours"}}')
        assert other.flush(30) == 0
        third = run(cfg(2), resources, RunClock(), echo=False)
        assert third.status == "succeeded" and third.broker.get("other_producers") == 1, third.broker
        assert third.delivery["verified_by"].startswith("read back"), third.delivery

        # Partitions added: the shape asked beside the offsets differs, the topics are set up again.
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        fourth = run(cfg(3), resources, RunClock(), echo=False)
        assert fourth.status == "succeeded" and fourth.broker["topic_partitions"] == 3
        assert kept.setup is not setup and kept.setup.topics.partitions == 3
        assert len(fourth.broker["offsets_after_by_partition"]) == 3
        sent = rows(consume_all(bootstrap, topic))
        assert sum(sent.values()) == 4 * 400 + 1
        for f in files[:4]:
            assert all(sent[r] == 1 for r in expected_rows(f)), f

        # The topic deleted: made again, as the first run made it.
        admin.delete_topics([topic])[topic].result(30)
        fifth = run(cfg(4), resources, RunClock(), echo=False)
        assert fifth.status == "succeeded" and fifth.broker.get("topic_created"), fifth.broker
    assert rows(consume_all(bootstrap, topic)) == expected_rows(files[4])
