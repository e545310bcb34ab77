"""Delivery guarantees: ``at-least-once`` and ``exactly-once``, and what each needs.

Exactly-once (the ``confluent`` and ``kafka-python`` sinks) rests on two things only:
Kafka's fencing of transactional ids, and the ledger. Every unit of input (one split of
one file, or one part of it after a shuffle) is written in a Kafka transaction together
with its ledger entry, under a ``transactional.id`` that is a function of the unit and of
the run's *scope*, never of the run or the task (Kafka Connect ties its ids to the input,
KIP-618, and Flink's KafkaSink to its subtasks): so whoever else writes the same unit,
an earlier attempt, a zombie, a second run over the same files, uses the same id. A writer
initialises the id (which ends every earlier holder's transaction: committed, or aborted
and fenced so that it can commit nothing more), then reads the ledger, and sends the unit
only if no entry of it is there. Of two writers of a unit, whichever initialises later
either sees the other's commit or has fenced it. No clock, lease or lock takes part.

Which entries count as delivered is one rule, :func:`counts_as_delivered`, asked by
``--incremental`` and ``--resume`` before a run and by every task during it. An entry
counts when it is of the file as it is now (size and modification time) and, for a plain
run, of its own lineage (its own attempts: a plain run sends all it is given, the second
plain run of a file sends it again, as asked). For ``--incremental`` and ``--resume``
runs any run's entry counts: a topic fed by scheduled runs holds every row once, whatever
they overlap, and a resumed run sends only what the topic lacks, even where another run
delivered a unit since. It could not be otherwise for ``--resume``: the ledger is keyed
by topic and unit, so compaction keeps only the latest run's entry of a unit, and an
earlier run's entry of its own is gone once another run delivered the unit again. Over shuffled input (more producers than splits, or ordered by key)
a task holds one part of many units and writes them in one transaction, under an id of
its part; its units are only ever written by that part.

A task whose unit was taken over (fenced) by another writer sends no more of it; the
unit counts as delivered once the other writer's entry is in the ledger, else the run
ends with exit 6. At-least-once: a task's records are acknowledged (``acks=all``,
idempotent producers) before its ledger entries are written; a retried task re-sends
what a failed attempt had sent, minus units the ledger already shows.

Open transactions hold every ``read_committed`` consumer of their partitions at their
first record until they end or ``transaction.timeout.ms`` passes: a run ends, at its
start, every transaction a failed or dead run left open on its topic
(:func:`end_lingering`), and ends its own after a failed job if Kafka answers.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kappa_ingest.config.choices import EXACTLY_ONCE
from kappa_ingest.delivery import ledger
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.errors import UsageError
from kappa_ingest.kafka.topics import python_admin
from kappa_ingest.source.splits import Unit

INIT_TIMEOUT_S = 60.0  # fencing an earlier attempt waits for its commit or abort to finish
# A task's init_transactions and commit wait for Kafka as long as its records may:
# delivery.timeout.ms, or Java's default. With every broker down a task then fails in that
# time, whichever call it was in, rather than after a fixed minute.
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
# An abort takes milliseconds; when it takes longer the coordinator is unreachable, and the
# next attempt (or whoever resumes the run) aborts the transaction by fencing it instead.
ABORT_TIMEOUT_S = 5.0
# Sizing transaction.timeout.ms: a task is expected to read at least this much input per
# second (measured here: ~18 MB/s per task; a slow cluster node or a busy broker, a fifth
# of that), gzip input inflating about fivefold.
FLOOR_BYTES_PER_S = 4 << 20
GZIP_RATIO = 5
MIN_TRANSACTION_TIMEOUT_MS = 60_000
BROKER_MAX_DEFAULT_MS = 900_000  # Kafka's transaction.max.timeout.ms default


def check_spark(mode: str, speculation: str | None) -> None:
    """Two live attempts of one task would fence each other's transactions."""
    if mode == EXACTLY_ONCE and str(speculation).lower() == "true":
        raise UsageError(
            "spark.speculation=true with --delivery exactly-once: two attempts of a task would fence each other;"
            " set spark.speculation=false or use --delivery at-least-once"
        )


ID_PREFIX = "kappa-ingest."  # every transactional id of the job (an ACL's prefix)


def scope_prefix(topic: str, lineage: str, incremental: bool) -> str:
    """The transactional ids' prefix of a run's scope: its topic's for incremental runs,
    its lineage's for any other. ':' appears in no topic name or run id, so no scope's
    prefix is another's."""
    return f"{ID_PREFIX}topic:{topic}:" if incremental else f"{ID_PREFIX}run:{lineage}:"


def unit_id(prefix: str, unit: Unit) -> str:
    """The transactional id of ``unit``: the same for every writer of it in the scope."""
    key = json.dumps([unit.file, unit.start, unit.length, unit.part, unit.parts], separators=(",", ":"))
    return f"{prefix}u:{hashlib.sha256(key.encode()).hexdigest()[:24]}"


def part_id(prefix: str, part: int, parts: int) -> str:
    """The transactional id of a task over shuffled input: part ``part`` of ``parts`` of every unit."""
    return f"{prefix}p:{parts}:{part}"


def transaction_timeout_ms(
    task_bytes: int,
    gzip: bool,
    rows_per_s_per_task: float | None,
    bytes_per_row: float,
    broker_max_ms: int,
    requested_ms: int | None = None,
) -> int:
    """``transaction.timeout.ms`` for tasks of up to ``task_bytes`` of input: twice the
    expected duration at the floor rate (or the throttle's), at least a minute, at most the
    brokers' ``transaction.max.timeout.ms``. UsageError, saying what to change, when a
    task would outlive the brokers' maximum."""
    expected_s = task_bytes * (GZIP_RATIO if gzip else 1) / FLOOR_BYTES_PER_S
    if rows_per_s_per_task:
        expected_s = max(expected_s, task_bytes / max(bytes_per_row, 1.0) / rows_per_s_per_task)
    if requested_ms is not None:
        if requested_ms > broker_max_ms:
            raise UsageError(
                f"--kafka-opt transaction.timeout.ms={requested_ms} exceeds the brokers' transaction.max.timeout.ms"
                f" ({broker_max_ms}); lower it, or raise the brokers' maximum"
            )
        return requested_ms
    if expected_s * 1000 > broker_max_ms:
        need = math.ceil(expected_s * 1000 / broker_max_ms)
        raise UsageError(
            f"with --delivery exactly-once each task holds one transaction, and a task here reads up to"
            f" {task_bytes / 1e6:,.0f} MB (about {expected_s:,.0f} s at the planning rate), longer than the brokers'"
            f" transaction.max.timeout.ms ({broker_max_ms / 1000:,.0f} s): use at least {need}x more --partitions,"
            " raise transaction.max.timeout.ms on the brokers, or use --delivery at-least-once"
        )
    return int(min(broker_max_ms, max(MIN_TRANSACTION_TIMEOUT_MS, 2 * expected_s * 1000)))


@dataclass(frozen=True)
class TaskDelivery:
    """What every task of a run needs to deliver its partition (travels in the task's closure)."""

    mode: str
    run_id: str
    lineage: str
    topic: str
    ledger_topic: str | None  # None: no ledger (dry run)
    ledger_conf: dict[str, Any]  # librdkafka settings to read the ledger
    files: dict[str, tuple[int, int, str]]  # canonical file -> InputFile.identity(): (size, mtime_ms, version)
    parts: int = 1
    parts_by: str = ""  # splits.BY_LINES, BY_KEYS, BY_ROWS or BY_KEY_VALUES, with parts > 1
    split_bytes: int = 0
    dead_letter_topic: str | None = None
    transaction_timeout_s: float = 60.0
    kafka_timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_MS / 1000  # see kafka_timeout_s()
    skip: frozenset[Unit] = field(default_factory=frozenset)  # delivered before this run
    ledger_start: dict[int, int] = field(default_factory=dict)  # where the run's reading of the ledger ended
    ordered: bool = False  # rows come sorted by event time: sent in that order, not unit by unit
    pace: tuple[int, float, int] | None = None  # (first event ms, speed, wall ms it is sent at): --replay-speed
    scope: str = ""  # scope_prefix(): the transactional ids' prefix
    any_run: bool = False  # --incremental and --resume: any run's entry counts as delivered (counts_as_delivered)
    shuffled: bool = False  # a task holds one part of many units: one transaction per task, not per unit
    holder: str = (
        ""  # the run holding the topic's lock (a watch, for its batches): its tasks stop once it is superseded
    )

    @property
    def transactional(self) -> bool:
        return self.mode == EXACTLY_ONCE

    def delivered(self, entry: Entry | None) -> bool:
        """Whether a ledger entry of a unit shows it delivered, for this run (:func:`counts_as_delivered`)."""
        if entry is None:
            return False
        size, mtime, version = self.files.get(entry.unit.file, (-1, -1, ""))
        return counts_as_delivered(entry, size, mtime, None if self.any_run else self.lineage, version)


def counts_as_delivered(entry: Entry | None, size: int, mtime_ms: int, lineage: str | None, version: str = "") -> bool:
    """Whether ``entry`` (the ledger's latest of a unit) shows the unit delivered to a run: it
    is of the file as it is now (``size``, ``mtime_ms``, an object's ``version``) and, unless
    ``lineage`` is None (an --incremental or --resume run: any run's entry counts), written
    by a run of ``lineage``."""
    return (entry is not None and entry.matches(size, mtime_ms, version)
            and (lineage is None or entry.lineage == lineage))  # fmt: skip


def kafka_timeout_s(settings: dict[str, str]) -> float:
    """How long a task's transactional calls wait for Kafka: the producer's delivery timeout."""
    return int(settings.get("delivery.timeout.ms", DEFAULT_DELIVERY_TIMEOUT_MS)) / 1000


def fence(conf: dict[str, Any], ids: list[str], timeout_s: float = INIT_TIMEOUT_S) -> dict[str, str]:
    """Initialise a transactional producer for each id, ending any transaction an earlier
    holder of the id left open (aborted, unless its commit had begun) and fencing that
    holder; returns the ids that could not be fenced, with why."""
    from confluent_kafka import KafkaException, Producer

    from kappa_ingest.kafka.topics import LOG

    def one(txid: str) -> str | None:
        producer = Producer({**conf, "transactional.id": txid, "logger": LOG})
        try:
            producer.list_topics(timeout=min(5.0, timeout_s))  # connected first: see WARM_UP in the sinks
            producer.init_transactions(timeout_s)
            return None
        except KafkaException as e:
            return e.args[0].str()
        finally:
            ledger.discard_queued(producer)

    if len(ids) < 2:  # (no pool: its workers are joined at the interpreter's exit, a warm-up's too)
        found = [one(txid) for txid in ids]
    else:
        with ThreadPoolExecutor(max_workers=min(8, len(ids)), thread_name_prefix="fence") as pool:
            found = list(pool.map(one, ids))
    return {txid: why for txid, why in zip(ids, found, strict=True) if why is not None}


def warm_coordinator(conf: dict[str, Any], prefix: str) -> threading.Thread:
    """Bring the cluster's transaction coordinator up on a background thread: on a cluster
    that never ran a transaction (an embedded broker's every run), the first
    ``init_transactions`` creates Kafka's transaction log and takes ~1 s, which the tasks
    would otherwise all wait for at once. Best effort: a real problem is the tasks' to report."""

    def warm() -> None:
        try:
            fence(conf, [f"{prefix}coordinator"], timeout_s=INIT_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - see above
            pass

    thread = threading.Thread(target=warm, name="transaction-coordinator", daemon=True)
    thread.start()
    return thread


# Transaction states in which a producer of the id may still write or commit (Kafka's
# TransactionState names); ids of completed transactions are never used again by the job.
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
LIVE_STATES = ("Empty", *OPEN_STATES)  # Empty: initialised, its producer may yet begin one


@dataclass
class Lingering:
    """What :func:`end_lingering` found and did."""

    fenced: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    error: str | None = None  # the transactions could not be listed (an old broker, no permission)


def end_lingering(
    conf: dict[str, Any], admin_conf: dict[str, Any], topic: str, prefixes: list[str], timeout_s: float = INIT_TIMEOUT_S
) -> Lingering:
    """End the job's transactions that could still write to ``topic`` and were left by
    runs that are over (failed, killed, taken over): every id under ``prefixes`` (the
    run's own scope, and those of runs it took over) that a producer may still use, and
    any other id of the job with a transaction open on ``topic``. Fencing aborts an open
    transaction and makes its producer's next call fail; ids in use by a live run of the
    scope are fenced too, which costs that run a retry, never a row.

    ``admin_conf``: kafka-python settings (it lists transactions, KIP-664, which
    confluent-kafka cannot). A cluster that cannot list them (brokers before 3.0, no
    DESCRIBE on the ids) is reported, not an error: correctness never rested on this."""
    try:
        listed = _list_transactions(admin_conf, timeout_s)
    except Exception as e:  # noqa: BLE001 - see above; the run says what happened
        return Lingering(error=f"{type(e).__name__}: {e}"[:300])
    ours = [t for t, state, _ in listed if any(t.startswith(p) for p in prefixes) and state in LIVE_STATES]
    others = [t for t, state, _ in listed if t not in ours and state in OPEN_STATES]
    if others:
        ours += _writing_to(admin_conf, others, topic)
    failures = fence(conf, ours, timeout_s)
    return Lingering([t for t in ours if t not in failures], [f"{t}: {why}" for t, why in failures.items()])


def _list_transactions(
    admin_conf: dict[str, Any], timeout_s: float, prefix: str = ID_PREFIX, client: Any = None
) -> list[tuple[str, str, int]]:
    """``(transactional id, state, producer id)`` of the ids under ``prefix`` the coordinators
    know; ``client``: a kept :func:`~kappa_ingest.kafka.topics.python_admin` (else one made here)."""
    from kafka.errors import UnsupportedVersionError

    admin = client or python_admin(admin_conf, timeout_s)
    try:
        try:  # filtered by the brokers (Kafka 4.1, KIP-1152); older ones list every id
            found = admin.list_transactions(transactional_id_pattern=re.escape(prefix) + ".*")
        except (UnsupportedVersionError, ValueError):
            found = admin.list_transactions()
    finally:
        if client is None:
            admin.close()
    return [(t.transactional_id, t.state.value if hasattr(t.state, "value") else str(t.state), t.producer_id)
            for listing in found.values() for t in listing if t.transactional_id.startswith(prefix)]  # fmt: skip


def producer_ids(
    admin_conf: dict[str, Any], prefix: str, timeout_s: float = ABORT_TIMEOUT_S, client: Any = None
) -> set[int]:
    """The producer ids of the transactional ids under ``prefix`` (a scope's): the producers
    that wrote a run's units."""
    return {pid for _, _, pid in _list_transactions(admin_conf, timeout_s, prefix, client)}


def _writing_to(admin_conf: dict[str, Any], ids: list[str], topic: str) -> list[str]:
    """Those of ``ids`` whose open transaction has written to ``topic``."""
    admin = python_admin(admin_conf, INIT_TIMEOUT_S)
    try:
        described = admin.describe_transactions(ids)
    except Exception:  # noqa: BLE001 - one of them ended meanwhile (unknown id): none is lingering for sure
        return []
    finally:
        admin.close()
    return [t for t, d in described.items() if any(tp.topic == topic for tp in d.topic_partitions)]
