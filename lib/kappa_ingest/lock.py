"""One run at a time per topic: a lock kept in the ledger topic itself.

Two scheduled runs over the same landing directory must not both send a file the ledger
does not show yet. Kafka has no compare-and-set, but the ledger has one partition, and
its order is one every client agrees on: a run appends a claim, reads the ledger up to
it, and holds the lock unless an earlier claim of another run on the same topic is still
alive. Of two runs starting at once, the one whose claim came first wins; the other
withdraws its claim and exits 6 naming the holder.

A holder renews its claim every ``LEASE_S / 4`` and withdraws it when the run ends (a
tombstone, which compaction removes). A claim is dead when its run is gone: on the same
host, when its process no longer exists (checked at once, with the process's start time
against reuse of its id); on another host, when it has not been renewed for ``LEASE_S``.
A run that takes over a dead claim first fences the dead run's transactional ids, so a
task of it still alive somewhere can commit nothing more.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kappa_ingest import delivery, ledger
from kappa_ingest.errors import KafkaUnavailable, LockHeld
from kappa_ingest.topics import LOG

LEASE_S = 60.0
WRITE_TIMEOUT_S = 10.0
RELEASE_TIMEOUT_S = 2.0  # a run ending because Kafka is gone must not wait for it here
_HELD: set[str] = set()  # runs of this process holding their lock (a notebook runs several, one after another)


def _started(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Claim:
    topic: str
    run_id: str
    lineage: str
    host: str
    pid: int
    pid_started: int | None
    at_ms: int
    tasks: int = 0  # known once the run planned its input: the transactional ids to fence

    def key(self) -> bytes:
        return json.dumps({"lock": self.topic, "run": self.run_id}, separators=(",", ":")).encode()

    def value(self) -> bytes:
        d = {k: v for k, v in self.__dict__.items() if k not in ("topic", "run_id")}
        return json.dumps(d, separators=(",", ":")).encode()

    def alive(self, now_ms: int) -> bool:
        if self.host == socket.gethostname() and self.pid == os.getpid():
            return self.run_id in _HELD
        if self.host == socket.gethostname():
            return _started(self.pid) == self.pid_started and self.pid_started is not None
        return now_ms - self.at_ms < LEASE_S * 1000

    def describe(self, now_ms: int) -> str:
        return f"run {self.run_id} (host {self.host}, pid {self.pid}, renewed {(now_ms - self.at_ms) / 1000:.0f} s ago)"


def claims(records: list[tuple[int, bytes, bytes | None]], topic: str) -> dict[str, Claim]:
    """The latest live claim of each run on ``topic`` (withdrawn ones dropped)."""
    out: dict[str, Claim] = {}
    for _, key, value in records:
        if not key.startswith(b"{"):
            continue
        k = json.loads(key)
        if k.get("lock") != topic:
            continue
        if value is None:
            out.pop(k["run"], None)
        else:
            out[k["run"]] = Claim(topic, k["run"], **json.loads(value))
    return out


@dataclass
class Lock:
    """The lock a run holds on its topic; renewed on a thread until :meth:`release`."""

    conf: dict[str, Any]
    ledger_topic: str
    claim: Claim
    taken_over: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def set_tasks(self, tasks: int) -> None:
        """Record how many tasks (transactional ids) the run has, for whoever takes over
        (best effort: a Kafka that cannot take it fails the run soon after)."""
        try:
            self._renew_with(tasks=tasks)
        except KafkaUnavailable:
            pass

    def _renew_with(self, timeout_s: float = WRITE_TIMEOUT_S, **changes: Any) -> None:
        # Under the mutex, and never after release: a renewal landing after the withdrawal
        # would leave a live-looking claim behind.
        with self._mutex:
            if self._stop.is_set():
                return
            self.claim = Claim(**{**self.claim.__dict__, "at_ms": _now_ms(), **changes})
            _write(self.conf, self.ledger_topic, self.claim.key(), self.claim.value(), timeout_s)

    def _renew(self) -> None:
        while not self._stop.wait(LEASE_S / 4):
            try:  # briefly: release() waits for a renewal under way
                self._renew_with(RELEASE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - Kafka away: the run itself will say so; the lease covers it
                pass

    def release(self) -> None:
        """Withdraw the claim, once (best effort: a run that cannot is found dead by the next one)."""
        with self._mutex:
            if self._stop.is_set():
                return
            self._stop.set()
        _HELD.discard(self.claim.run_id)
        try:
            _write(self.conf, self.ledger_topic, self.claim.key(), None, RELEASE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - see above
            pass


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _write(
    conf: dict[str, Any], ledger_topic: str, key: bytes, value: bytes | None, timeout_s: float = WRITE_TIMEOUT_S
) -> int:
    """Append one record to the ledger, acknowledged by all in-sync replicas; its offset."""
    from confluent_kafka import Producer

    got: list[Any] = []
    # Not idempotent: one record, and a retried duplicate of it says the same; an idempotent
    # producer first waits ~0.5 s for its producer id, which every run would pay twice.
    producer = Producer({**conf, "acks": "all", "linger.ms": 0, "logger": LOG})
    producer.produce(ledger_topic, value, key, on_delivery=lambda err, msg: got.append((err, msg)))
    producer.flush(timeout_s)
    if not got or got[0][0] is not None:
        why = got[0][0].str() if got else f"no answer in {timeout_s:.0f} s"
        raise KafkaUnavailable(f"the ledger {ledger_topic!r} did not take the run's lock record ({why})")
    return got[0][1].offset()


def acquire(conf: dict[str, Any], ledger_topic: str, topic: str, run_id: str, lineage: str) -> Lock:
    """Hold ``topic``'s lock for ``run_id``, or raise LockHeld (exit 6) naming the holder.
    The ledger topic must exist."""
    pid = os.getpid()
    claim = Claim(topic, run_id, lineage, socket.gethostname(), pid, _started(pid), _now_ms())
    offset = _write(conf, ledger_topic, claim.key(), claim.value())
    records = ledger.read_records(conf, ledger_topic, isolation="read_uncommitted")
    now = _now_ms()
    earlier = [c for c in claims([r for r in records if r[0] < offset], topic).values() if c.run_id != run_id]
    live = [c for c in earlier if c.alive(now)]
    if live:
        _write(conf, ledger_topic, claim.key(), None)
        holder = live[0]
        raise LockHeld(
            f"topic {topic} is locked by {holder.describe(now)}: one run at a time sends to a topic;"
            f" wait for it to end (a killed run's lock is taken over once it is found dead: at once on its"
            f" own host, after {LEASE_S:.0f} s elsewhere)"
        )
    dead = earlier  # none of them is alive
    ids = [delivery.transactional_id(c.lineage, p) for c in dead for p in range(c.tasks)]
    failures = delivery.fence(conf, ids)
    if failures:
        _write(conf, ledger_topic, claim.key(), None)
        raise KafkaUnavailable(f"could not fence the transactions of a dead run holding topic {topic}: {failures[0]}")
    for c in dead:  # withdrawn for it: the next run need not look at it again
        _write(conf, ledger_topic, c.key(), None)
    lock = Lock(conf, ledger_topic, claim, [c.run_id for c in dead])
    _HELD.add(run_id)
    lock._thread = threading.Thread(target=lock._renew, name="ledger-lock", daemon=True)
    lock._thread.start()
    return lock


def hold(cfg: Any, servers: str) -> Lock:
    """Take the lock of ``cfg``'s topic (an IngestConfig) at ``servers``, creating the
    ledger topic it lives in if need be."""
    from kappa_ingest.kafka_settings import connection_conf
    from kappa_ingest.topics import Admin

    settings = cfg.producer_settings()
    with Admin(servers, settings) as admin:
        replicas, ledger_config = ledger.topic_config(admin.check_reachable())
        admin.ensure_topic(cfg.ledger_topic, 1, replicas, ledger_config)
    return acquire(connection_conf(settings, servers), cfg.ledger_topic, cfg.topic, cfg.run_id, cfg.lineage)
