"""One run at a time per topic: a lock kept in the ledger topic itself.

The lock saves work; it decides nothing about delivery, which rests on Kafka's fencing
and the ledger alone (:mod:`kappa_ingest.delivery.guarantees`). Without it two scheduled runs over
the same landing directory would both read and convert what the ledger does not show
yet, and fence each other's transactions unit by unit; with it the second exits 6.

Kafka has no compare-and-set, but the ledger has one partition, and its order is one
every client agrees on: a run appends a claim, reads the ledger up to it, and holds the
lock unless an earlier claim of another run on the same topic is still alive. Of two
runs starting at once, the one whose claim came first wins; the other withdraws its
claim and exits 6 naming the holder.

Whether a claim is alive is judged on one clock, the broker's: the ledger's records are
stamped as they are appended (``LogAppendTime``), and a claim is alive while the reader's
own claim, just appended, is less than the claim's lease younger than the claim's last
renewal. No client's clock takes part, so a host whose clock runs ahead cannot take a live
lock. On the holder's own host (same hostname, boot and PID namespace: containers that
share a hostname have PID namespaces of their own) a claim is also dead at once when its
process is gone.

A holder renews its claim every lease/4 and reads what was written since: a tombstone of
its claim that it did not write, or ``{"superseded": its run}``, means another run took
the lock over (judged it dead); the holder then cancels its Spark jobs (``on_lost``) and
the run exits 6. A run taking over first records the dead runs as superseded (a task of
theirs still alive stops at its next unit), then ends their transactions, then withdraws
their claims. Every run, taking over or not, ends at its start the transactions a failed
run left open on its topic (:func:`kappa_ingest.delivery.guarantees.end_lingering`).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery import ledger
from kappa_ingest.errors import KafkaUnavailable, LockHeld
from kappa_ingest.kafka.topics import LOG

LEASE_S = 60.0
WRITE_TIMEOUT_S = 10.0
RELEASE_TIMEOUT_S = 2.0  # a run ending because Kafka is gone must not wait for it here
LOOK_TIMEOUT_S = 5.0  # a renewal's read of the ledger (release() waits for one under way)
_HELD: set[str] = set()  # runs of this process holding their lock (a notebook runs several, one after another)


def _started(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@cache
def host_identity() -> tuple[str, str | None, int | None]:
    """(hostname, boot id, PID namespace): processes compare PIDs only when all three match."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot: str | None = f.read().strip()
    except OSError:
        boot = None
    try:
        pidns: int | None = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pidns = None
    return socket.gethostname(), boot, pidns


@dataclass(frozen=True)
class Claim:
    topic: str
    run_id: str
    lineage: str
    host: str
    pid: int
    pid_started: int | None
    at_ms: int  # the holder's clock: shown, never compared
    boot: str | None = None
    pidns: int | None = None
    lease_ms: int = int(LEASE_S * 1000)
    scope: str = ""  # its transactional ids' prefix (delivery.scope_prefix)
    ts: int = 0  # the broker's time of its newest record (not stored in it)

    def key(self) -> bytes:
        return json.dumps({"lock": self.topic, "run": self.run_id}, separators=(",", ":")).encode()

    def value(self) -> bytes:
        d = {k: v for k, v in self.__dict__.items() if k not in ("topic", "run_id", "ts")}
        return json.dumps(d, separators=(",", ":")).encode()

    def same_host(self) -> bool:
        host, boot, pidns = host_identity()
        return self.host == host and self.boot is not None and (self.boot, self.pidns) == (boot, pidns)

    def alive(self, now_ts: int) -> bool:
        """``now_ts``: the broker's time of the reader's own newest record."""
        if self.same_host():
            if self.pid == os.getpid():
                return self.run_id in _HELD
            return _started(self.pid) == self.pid_started and self.pid_started is not None
        return now_ts - self.ts < self.lease_ms

    def transaction_scope(self) -> str:
        """The prefix of its transactional ids (claims written before scopes: its lineage's old ids)."""
        return self.scope or f"{delivery.ID_PREFIX}{self.lineage}."

    def describe(self, now_ts: int) -> str:
        return (f"run {self.run_id} (host {self.host}, pid {self.pid}, renewed {(now_ts - self.ts) / 1000:.0f} s"
                " ago by the broker's clock)")  # fmt: skip


_CLAIM_FIELDS = {f.name for f in fields(Claim)} - {"topic", "run_id", "ts"}


def claims(records: list[ledger.Record], topic: str) -> dict[str, Claim]:
    """The latest live claim of each run on ``topic`` (withdrawn ones dropped)."""
    out: dict[str, Claim] = {}
    for r in records:
        if r.kind != ledger.CLAIM:
            continue
        k = ledger.key_object(r)
        if k.get("lock") != topic or "run" not in k:
            continue
        if r.value is None:
            out.pop(k["run"], None)
        else:
            values = {n: v for n, v in json.loads(r.value).items() if n in _CLAIM_FIELDS}
            out[k["run"]] = Claim(topic, k["run"], **values, ts=r.timestamp_ms)
    return out


@dataclass
class Lock:
    """The lock a run holds on its topic (``claim`` None: taken without one, ``--no-lock``);
    renewed on a thread until :meth:`release`. ``lost`` says who took it over, if anyone."""

    conf: dict[str, Any]
    ledger_topic: str
    claim: Claim | None
    taken_over: list[str] = field(default_factory=list)
    lingering: delivery.Lingering = field(default_factory=delivery.Lingering)
    lost: str | None = None
    renewal_failures: int = 0
    position: int = 0  # the ledger offset read up to
    ledger_checked: int | None = None  # the data replication the ledger was found right for as the lock was taken
    _on_lost: Callable[[str], None] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _mutex: threading.Lock = field(default_factory=threading.Lock)
    _released: bool = False

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` once if another run takes the lock over (at once if it has)."""
        self._on_lost = callback
        if self.lost is not None:
            callback(self.lost)

    def _renew(self) -> None:
        assert self.claim is not None
        while not self._stop.wait(self.claim.lease_ms / 4000):
            try:  # briefly: release() waits for a renewal under way
                with self._mutex:
                    if self._stop.is_set() or self.lost is not None:
                        return
                    self.claim = Claim(**{**self.claim.__dict__, "at_ms": time.time_ns() // 1_000_000})
                    offset, _ = _write(self.conf, self.ledger_topic, self.claim.key(), self.claim.value(),
                                       RELEASE_TIMEOUT_S)  # fmt: skip
                self._look(offset)
            except Exception:  # noqa: BLE001 - Kafka away: the run's own calls say so; counted for the report
                self.renewal_failures += 1

    def _look(self, upto: int) -> None:
        """Read the ledger from where this lock last read up to its renewal at ``upto``:
        another run's tombstone of the claim, or a record superseding the run, is a takeover."""
        assert self.claim is not None
        run, topic = self.claim.run_id, self.claim.topic
        records = ledger.read_records(self.conf, self.ledger_topic, LOOK_TIMEOUT_S, start={0: self.position},
                                      isolation="read_uncommitted")  # fmt: skip
        for r in records:
            if r.offset > upto:
                break
            self.position = r.offset + 1
            key = ledger.key_object(r)
            withdrawn = r.kind == ledger.CLAIM and r.value is None and key == {"lock": topic, "run": run}
            if withdrawn or (r.kind == ledger.SUPERSEDED and key.get("superseded") == run):
                by = json.loads(r.value)["by"] if r.value is not None else "another run"
                self._lose(f"run {self.claim.run_id} lost its lock on topic {self.claim.topic}: {by} took it over"
                           " (it found this run dead)")  # fmt: skip
                return

    def _lose(self, reason: str) -> None:
        with self._mutex:  # as release() sets _stop: once it has, no loss is taken, however late the renewal
            if self._stop.is_set():  # released meanwhile: the run is over, nothing of it to stop
                return
            self.lost = reason
        _HELD.discard(self.claim.run_id if self.claim else "")
        if self._on_lost is not None:
            self._on_lost(reason)

    def stop_renewing(self) -> None:
        """Stop renewing the claim. A renewal under way ends first: once this returns,
        ``on_lost`` is never called and :meth:`summary` is final."""
        with self._mutex:
            self._stop.set()
        thread = self._thread
        if self.claim is not None and thread is not None and thread is not threading.current_thread():
            thread.join(RELEASE_TIMEOUT_S + LOOK_TIMEOUT_S + 1)

    def release(self) -> None:
        """Withdraw the claim, once (best effort: a run that cannot is found dead by the next
        one); its renewals stopped first if they were not."""
        self.stop_renewing()
        with self._mutex:
            if self._released or self.claim is None:
                return
            self._released = True
        _HELD.discard(self.claim.run_id)
        try:
            _write(self.conf, self.ledger_topic, self.claim.key(), None, RELEASE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - see above
            pass

    def summary(self) -> dict[str, Any]:
        """For the run report."""
        out: dict[str, Any] = {"held": self.claim is not None}
        if self.taken_over:
            out["taken_over_from"] = self.taken_over
        if self.lingering.fenced:
            out["lingering_transactions_ended"] = len(self.lingering.fenced)
        if self.lingering.failures:
            out["lingering_not_ended"] = self.lingering.failures[:5]
        if self.lingering.error:
            out["lingering_not_listed"] = self.lingering.error
        if self.renewal_failures:
            out["renewal_failures"] = self.renewal_failures
        if self.lost:
            out["lost"] = self.lost
        return out


def _write(
    conf: dict[str, Any], ledger_topic: str, key: bytes, value: bytes | None, timeout_s: float = WRITE_TIMEOUT_S
) -> tuple[int, int]:
    """Append one record to the ledger, acknowledged by all in-sync replicas; its offset
    and the broker's timestamp of it."""
    from confluent_kafka import Producer

    got: list[Any] = []
    # Not idempotent: one record, and a retried duplicate of it says the same; an idempotent
    # producer first waits ~0.5 s for its producer id, which every run would pay twice.
    producer = Producer({**conf, "acks": "all", "linger.ms": 0, "logger": LOG})
    producer.produce(ledger_topic, value, key, on_delivery=lambda err, msg: got.append((err, msg)),
                     headers=ledger.kind_headers(ledger.CLAIM))  # fmt: skip
    producer.flush(timeout_s)
    if not got or got[0][0] is not None:
        why = got[0][0].str() if got else f"no answer in {timeout_s:.0f} s"
        raise KafkaUnavailable(f"the ledger {ledger_topic!r} did not take the run's lock record ({why})")
    return got[0][1].offset(), got[0][1].timestamp()[1]


def acquire(
    conf: dict[str, Any],
    admin_conf: dict[str, Any],
    ledger_topic: str,
    topic: str,
    run_id: str,
    lineage: str,
    scope: str,
    lease_s: float = LEASE_S,
) -> Lock:
    """Hold ``topic``'s lock for ``run_id``, or raise LockHeld (exit 6) naming the holder.
    The ledger topic must exist. ``admin_conf``: kafka-python settings (to list transactions)."""
    host, boot, pidns = host_identity()
    pid = os.getpid()
    claim = Claim(topic, run_id, lineage, host, pid, _started(pid), time.time_ns() // 1_000_000, boot, pidns,
                  int(lease_s * 1000), scope)  # fmt: skip
    offset, now = _write(conf, ledger_topic, claim.key(), claim.value())
    records: list[ledger.Record] = []  # the claims only: a ledger of a million entries is not held
    ledger.read_on(conf, ledger_topic, None, lambda r: records.append(r) if r.kind == ledger.CLAIM else None,
                   isolation="read_uncommitted")  # fmt: skip
    earlier = [c for c in claims([r for r in records if r.offset < offset], topic).values() if c.run_id != run_id]
    live = [c for c in earlier if c.alive(now)]
    if live:
        _write(conf, ledger_topic, claim.key(), None)
        raise LockHeld(
            f"topic {topic} is locked by {live[0].describe(now)}: one run at a time sends to a topic; wait for it to"
            f" end (a killed run's lock is taken over once it is found dead: at once on its own host, after its"
            f" lease of {live[0].lease_ms / 1000:.0f} s elsewhere)"
        )
    dead = earlier  # none of them is alive
    if dead:  # first: a task of theirs initialising a unit from now on reads this and stops
        ledger.supersede(conf, ledger_topic, [c.run_id for c in dead], run_id)
    lingering = delivery.end_lingering(conf, admin_conf, topic, [scope, *(c.transaction_scope() for c in dead)])
    for c in dead:  # withdrawn for it: the next run need not look at it again
        _write(conf, ledger_topic, c.key(), None)
    lock = Lock(conf, ledger_topic, replace_ts(claim, now), [c.run_id for c in dead], lingering, position=offset + 1)
    _HELD.add(run_id)
    lock._thread = threading.Thread(target=lock._renew, name="ledger-lock", daemon=True)
    lock._thread.start()
    return lock


def replace_ts(claim: Claim, ts: int) -> Claim:
    return Claim(**{**claim.__dict__, "ts": ts})


def hold(cfg: Any, servers: str) -> Lock:
    """Take the lock of ``cfg``'s topic (an IngestConfig) at ``servers``, creating the ledger
    topic it lives in if need be (and refusing one that is not as the ledger must be); with
    ``--no-lock`` only end what failed runs left open on the topic."""
    from kappa_ingest.kafka.settings import connection_conf, kafka_python_connection
    from kappa_ingest.kafka.topics import Admin

    settings = cfg.producer_settings()
    with Admin(servers, settings) as admin:
        admin.check_reachable()  # first: a refused password says so at once
        existing = admin.describe(cfg.topic)
        replication = existing.replication if existing else cfg.replication_factor
        ledger.ensure(admin, cfg.ledger_topic, replication)
    conf, admin_conf = connection_conf(settings, servers), kafka_python_connection(settings, servers)
    scope = delivery.scope_prefix(cfg.topic, cfg.lineage, cfg.incremental)
    if not cfg.lock:
        lock = Lock(
            conf, cfg.ledger_topic, None, lingering=delivery.end_lingering(conf, admin_conf, cfg.topic, [scope])
        )
    else:
        lock = acquire(conf, admin_conf, cfg.ledger_topic, cfg.topic, cfg.run_id, cfg.lineage, scope, cfg.lock_lease_s)
    lock.ledger_checked = replication
    return lock
