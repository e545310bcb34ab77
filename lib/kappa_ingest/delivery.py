"""Delivery guarantees: ``at-least-once`` and ``exactly-once``, and what each needs.

Exactly-once (the ``confluent`` and ``kafka-python`` sinks): every task writes its records
and its ledger entries in one Kafka transaction, with a ``transactional.id`` that is the
same for every attempt of that task (``kappa-ingest.<lineage>.<partition>``). A new attempt
therefore fences the old one (its open transaction is aborted, a commit it may still try
fails), and then reads the ledger: a unit an earlier attempt did commit (a task that
committed and died before Spark heard of it) is not sent again. A task ends only after
its commit returned. Spark's own Kafka sink writes no transactions (SPARK-28908); it is
at-least-once only.

At-least-once: a task's records are acknowledged (``acks=all``, idempotent producers)
before its ledger entries are written; a retried task re-sends what a failed attempt
had sent, minus units the ledger already shows.

Whoever resumes a run, or ends one that failed, first fences the transactional ids the
run (and the runs it resumes) used, so that no transaction is left open: an open
transaction holds every ``read_committed`` consumer of its partitions at its first
record until it ends or ``transaction.timeout.ms`` passes.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kappa_ingest.errors import UsageError
from kappa_ingest.splits import Unit

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
MODES = (AT_LEAST_ONCE, EXACTLY_ONCE)
TRANSACTIONAL_SINKS = ("confluent", "kafka-python")
# What --delivery is when not given, for a sink that can do it (README, "Delivery guarantees").
DEFAULT_MODE = EXACTLY_ONCE

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


def resolve_mode(requested: str | None, sink: str, settings: dict[str, str]) -> str:
    """The run's delivery mode; UsageError for a mode its sink or settings cannot keep.

    Unasked, it is exactly-once where the sink and the producer settings allow (``acks=all``,
    idempotence), else at-least-once."""
    if requested is None:
        if sink in TRANSACTIONAL_SINKS and DEFAULT_MODE == EXACTLY_ONCE and not _transactions_ruled_out(settings):
            return EXACTLY_ONCE
        return AT_LEAST_ONCE
    if requested not in MODES:
        raise UsageError(f"--delivery {requested!r}: accepted: {', '.join(MODES)}")
    if requested == EXACTLY_ONCE and sink not in TRANSACTIONAL_SINKS:
        raise UsageError(
            f"--delivery exactly-once: the {sink} sink (Spark's own Kafka writer) cannot write Kafka transactions;"
            f" use --sink {' or --sink '.join(TRANSACTIONAL_SINKS)}, or --delivery at-least-once"
        )
    if requested == EXACTLY_ONCE and _transactions_ruled_out(settings):
        raise UsageError(f"--delivery exactly-once needs {_transactions_ruled_out(settings)}")
    return requested


def _transactions_ruled_out(settings: dict[str, str]) -> str | None:
    """What in the producer settings Kafka's transactions cannot work with, if anything."""
    if settings.get("acks", "all") not in ("all", "-1"):
        return f"acks=all (the settings have acks={settings['acks']})"
    if str(settings.get("enable.idempotence", "true")).lower() != "true":
        return "enable.idempotence=true"
    return None


def check_spark(mode: str, speculation: str | None) -> None:
    """Two live attempts of one task would fence each other's transactions."""
    if mode == EXACTLY_ONCE and str(speculation).lower() == "true":
        raise UsageError(
            "spark.speculation=true with --delivery exactly-once: two attempts of a task would fence each other;"
            " set spark.speculation=false or use --delivery at-least-once"
        )


def transactional_id(lineage: str, partition: int) -> str:
    """The same for every attempt of a task, in the run and in the runs that resume it."""
    return f"kappa-ingest.{lineage}.{partition}"


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
    ledger_conf: dict[str, Any]  # librdkafka settings to read the ledger (retried attempts)
    files: dict[str, tuple[int, int]]  # canonical file -> (size, mtime_ms)
    parts: int = 1
    split_bytes: int = 0
    dead_letter_topic: str | None = None
    transaction_timeout_s: float = 60.0
    kafka_timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_MS / 1000  # see kafka_timeout_s()
    skip: frozenset[Unit] = field(default_factory=frozenset)  # delivered before this run
    ledger_start: dict[int, int] = field(default_factory=dict)  # the ledger's end offsets when the run began
    ordered: bool = False  # rows come sorted by event time: sent in that order, not unit by unit
    pace: tuple[int, float, int] | None = None  # (first event ms, speed, wall ms it is sent at): --replay-speed

    @property
    def transactional(self) -> bool:
        return self.mode == EXACTLY_ONCE

    def transactional_id(self, partition: int) -> str | None:
        return transactional_id(self.lineage, partition) if self.transactional else None


def kafka_timeout_s(settings: dict[str, str]) -> float:
    """How long a task's transactional calls wait for Kafka: the producer's delivery timeout."""
    return int(settings.get("delivery.timeout.ms", DEFAULT_DELIVERY_TIMEOUT_MS)) / 1000


def fence(conf: dict[str, Any], ids: list[str], timeout_s: float = INIT_TIMEOUT_S) -> list[str]:
    """Initialise a transactional producer for each id, aborting any transaction an earlier
    holder of the id left open; returns the ids that could not be fenced, with why."""
    from confluent_kafka import KafkaException, Producer

    from kappa_ingest.topics import LOG

    def one(txid: str) -> str | None:
        producer = Producer({**conf, "transactional.id": txid, "logger": LOG})
        try:
            producer.init_transactions(timeout_s)
            return None
        except KafkaException as e:
            return f"{txid}: {e.args[0].str()}"
        finally:
            try:
                producer.purge()
                producer.poll(0)
            except KafkaException:
                pass

    if not ids:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(ids)), thread_name_prefix="fence") as pool:
        return [failure for failure in pool.map(one, ids) if failure is not None]


def warm_coordinator(conf: dict[str, Any], lineage: str) -> threading.Thread:
    """Bring the cluster's transaction coordinator up on a background thread: on a cluster
    that never ran a transaction (an embedded broker's every run), the first
    ``init_transactions`` creates Kafka's transaction log and takes ~1 s, which the tasks
    would otherwise all wait for at once. Best effort: a real problem is the tasks' to report."""

    def warm() -> None:
        try:
            fence(conf, [f"kappa-ingest.{lineage}.coordinator"], timeout_s=INIT_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - see above
            pass

    thread = threading.Thread(target=warm, name="transaction-coordinator", daemon=True)
    thread.start()
    return thread
