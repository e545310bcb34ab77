"""What a task does with a transactional error, by librdkafka's classification: retriable
ones are called again, an abortable one aborts, a fatal one gets a new producer and no
further call. (The real faults: test_exactly_once_recovery.py pauses the coordinator while
a unit commits; test_confluent_producers.py fences a producer on every front end.)"""

from __future__ import annotations

import time

import pytest

from kappa_ingest.delivery.guarantees import TaskDelivery
from kappa_ingest.sinks import writers
from kappa_ingest.sinks.producer import TransactionFailed
from kappa_ingest.sinks.task_stats import TaskStats


class Scripted:
    """A producer whose transactional calls fail as scripted, then succeed."""

    def __init__(self, init: list[TransactionFailed] = (), commit: list[TransactionFailed] = ()) -> None:
        self.init_errors, self.commit_errors = list(init), list(commit)
        self.calls: list[str] = []
        self.closed = False

    def init_transactions(self, timeout_s: float) -> None:
        self.calls.append("init")
        if self.init_errors:
            raise self.init_errors.pop(0)

    def commit(self, timeout_s: float) -> None:
        self.calls.append("commit")
        if self.commit_errors:
            raise self.commit_errors.pop(0)

    def abort(self, timeout_s: float) -> None:
        self.calls.append("abort")

    def close(self) -> None:
        self.closed = True


def _task() -> TaskDelivery:
    return TaskDelivery("exactly-once", "r", "r", "t", "_l", {}, {}, kafka_timeout_s=30.0)


def _error(**flags: bool) -> TransactionFailed:
    return TransactionFailed("testing", "scripted", **flags)


def test_a_retriable_init_is_called_again_on_the_same_producer():
    p = Scripted(init=[_error(retriable=True), _error(retriable=True)])
    assert writers.open_transactional(lambda txid: p, "x", _task(), TaskStats(0, 0, 0, 0, "h")) is p
    assert p.calls == ["init", "init", "init"] and not p.closed


def test_a_fatal_init_gets_a_new_producer_and_no_further_call_on_the_old():
    first, second = Scripted(init=[_error(fatal=True)]), Scripted()
    made = iter([first, second])
    got = writers.open_transactional(lambda txid: next(made), "x", _task(), TaskStats(0, 0, 0, 0, "h"))
    assert got is second and second.calls == ["init"]
    assert first.calls == ["init"] and first.closed  # no abort, no second init on a fatal producer


def test_a_retriable_commit_is_called_again_and_counted_an_abortable_one_is_not():
    stats = TaskStats(0, 0, 0, 0, "h")
    p = Scripted(commit=[_error(retriable=True), _error(retriable=True)])
    writers.commit(p, _task(), stats, began=time.monotonic())
    assert p.calls == ["commit"] * 3 and stats.commit_retries == 2
    q = Scripted(commit=[_error(abortable=True)])
    with pytest.raises(TransactionFailed):
        writers.commit(q, _task(), stats, began=time.monotonic())
    assert q.calls == ["commit"]


@pytest.mark.parametrize(("flags", "aborted"), [({"fatal": True}, False), ({"abortable": True}, True)])
def test_only_a_producer_left_usable_is_asked_to_abort(flags, aborted):
    p = Scripted()
    writers._abort(p, TaskStats(0, 0, 0, 0, "h"), _error(**flags))
    assert ("abort" in p.calls) is aborted


class Recording:
    """A producer that records what it is asked to send and when it is flushed."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def send_ledger(self, topic: str, records: list) -> None:
        self.calls.append(("send", len(records)))

    def flush(self) -> None:
        self.calls.append(("flush", 0))


def test_a_tasks_ledger_entries_go_in_batches_the_ledger_takes():
    """A batch follows the data topic's limit (up to 16 MB), the ledger's is Kafka's default:
    many entries at once are flushed every LEDGER_CHUNK_BYTES, one entry is sent alone."""
    entry = (b"k" * 100, b"v" * 924)  # 1 KB
    one = Recording()
    writers.send_entries(one, "ledger", [entry])
    assert one.calls == [("send", 1)]
    many = Recording()
    writers.send_entries(many, "ledger", [entry] * 1200)
    per_chunk = writers.LEDGER_CHUNK_BYTES // 1024
    assert many.calls == [("send", per_chunk), ("flush", 0), ("send", per_chunk), ("flush", 0),
                          ("send", 1200 - 2 * per_chunk)]  # fmt: skip


class Clock:
    """time.monotonic and time.sleep for the writers: a sleep moves the clock on, at once."""

    def __init__(self) -> None:
        self.now, self.waits = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.waits.append(s)
        self.now += s


def test_a_retry_backs_off_doubling_with_jitter_within_the_deadline_and_the_wait_is_counted(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(writers.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(writers.time, "sleep", clock.sleep)
    stats = TaskStats(0, 0, 0, 0, "h")
    p = Scripted(commit=[_error(retriable=True)] * 6)
    writers.commit(p, _task(), stats, began=clock.now)
    assert p.calls == ["commit"] * 7 and stats.commit_retries == 6
    caps = [min(writers.RETRY_LONGEST_S, writers.RETRY_FIRST_S * 2**i) for i in range(6)]  # 0.1, 0.2, ... 2, 2
    assert len(clock.waits) == 6 and all(cap / 2 <= w <= cap for w, cap in zip(clock.waits, caps, strict=True))
    assert stats.retry_wait_ms == pytest.approx(sum(clock.waits) * 1000, abs=6)
    # An init retried, and a new producer after a fatal error, wait too.
    clock.waits.clear()
    made = iter([Scripted(init=[_error(retriable=True), _error(fatal=True)]), Scripted()])
    writers.open_transactional(lambda txid: next(made), "x", _task(), stats)
    assert len(clock.waits) == 2 == stats.init_retries
    # Never past the deadline: a commit retried until the transaction is too old for the broker.
    clock.waits.clear()
    began = clock.now
    with pytest.raises(TransactionFailed):
        writers.commit(Scripted(commit=[_error(retriable=True)] * 1000), _task(), stats, began=began)
    assert clock.now == pytest.approx(began + _task().transaction_timeout_s) and max(clock.waits) <= 2.0
