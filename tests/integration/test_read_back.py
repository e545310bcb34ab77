"""Reading a topic back (kappa_ingest.delivery.reconcile.read_back) in C (c/consume.c) counts what
the Python consumer loop counts, record for record: run ids, files, units by their
offsets, each partition's span of timestamps; aborted transactions and other producers'
records not counted."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kappa_ingest import native
from kappa_ingest.delivery import reconcile
from kappa_ingest.source.splits import Unit

pytestmark = pytest.mark.integration


def _send(bootstrap: str, topic: str, run: str, files: list[str], n: int, commit: bool, at_ms: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"rb-{run}-{commit}", "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, b"{}", key=str(i % 7).encode(), partition=i % 2, timestamp=at_ms + i,
                  headers=[("run_id", run.encode()), ("source_file", files[i % len(files)].encode())])  # fmt: skip
    p.flush(30)
    (p.commit_transaction if commit else p.abort_transaction)(30)


def test_the_c_reader_counts_what_the_python_consumer_counts(kafka, monkeypatch):
    topic = "read-back-c"
    bs = kafka.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    _send(bs, topic, "one", ["/in/a.csv", "/in/b.csv"], 30_000, True, 1_000)
    _send(bs, topic, "one", ["/in/a.csv"], 5_000, False, 90_000)  # aborted: never counted
    _send(bs, topic, "other", ["/in/c.csv"], 7_000, True, 50_000)
    _send(bs, topic, "one", ["/in/b.csv"], 3_000, True, 200_000)
    plain = Producer({"bootstrap.servers": bs})
    for i in range(500):  # no headers at all
        plain.produce(topic, b"x", partition=i % 2)
    plain.flush(30)
    probe = Consumer({"bootstrap.servers": bs, "group.id": "probe"})
    end = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)}
    probe.close()
    a, b = (Unit("/in/a.csv", 0, 10),), (Unit("/in/b.csv", 0, 10), Unit("/in/b.csv", 10, 10))
    located = {a: [(0, 0, 15_000)], b: [(1, 100, 50)]}

    def read() -> reconcile.ReadBack:
        return reconcile.read_back({"bootstrap.servers": bs}, topic, dict.fromkeys(end, OFFSET_BEGINNING), end,
                                   {"one"}, by_partition=True, located=located)  # fmt: skip

    in_c = read()
    monkeypatch.setattr(native, "Reader", lambda *a, **k: (_ for _ in ()).throw(native.NativeUnavailable("off")))
    in_python = read()
    assert in_c.counts == in_python.counts == {("one", "/in/a.csv"): 15_000, ("one", "/in/b.csv"): 18_000}
    assert in_c.by_transaction == in_python.by_transaction == {a: 15_000, b: 50}
    assert in_c.partitions == in_python.partitions
    assert {p: s[0] for p, s in in_c.partitions.items()} == {0: 16_500, 1: 16_500}
    assert in_c.partitions[0][1] == 1_000 and in_c.partitions[1][2] == 200_000 + 2_999
