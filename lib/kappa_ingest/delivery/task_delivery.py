"""What a run's tasks need to deliver (:class:`TaskDelivery`), from its settings and its
source: for exactly-once, a transaction timeout sized to the longest transaction and
checked against the brokers' maximum, and stretched for a paced replay."""

from __future__ import annotations

from dataclasses import replace

from kappa_ingest.config import IngestConfig
from kappa_ingest.config.choices import AT_LEAST_ONCE, EXACTLY_ONCE
from kappa_ingest.delivery import guarantees
from kappa_ingest.delivery.guarantees import TaskDelivery
from kappa_ingest.errors import UsageError
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.source.dataframe import Source
from kappa_ingest.source.splits import Unit


def for_tasks(
    cfg: IngestConfig,
    source: Source,
    admin: Admin | None,
    conf: dict,
    skip: frozenset[Unit],
    rate=None,
    rows: int | None = None,
) -> TaskDelivery:
    """What the tasks need to deliver; for exactly-once, with a transaction timeout sized
    to the longest transaction (a unit's, or over shuffled input a task's) and checked
    against the brokers' maximum. ``rows``: the source's rows, estimated (sizes the timeout)."""
    files = {f.path: f.identity() for f in source.plan.files}
    mode = cfg.delivery if admin is not None else AT_LEAST_ONCE  # a dry run has no transactions
    timeout_s = 60.0
    if admin is not None and cfg.delivery == EXACTLY_ONCE:
        broker_max = admin.broker_setting("transaction.max.timeout.ms")
        tasks = max(1, source.tasks)
        largest = max((f.size for f in source.plan.files), default=0)
        task_bytes = min(largest, source.plan.split_bytes)
        if source.shuffled:
            task_bytes = max(task_bytes, -(-source.input_bytes // tasks))
        rows = rows or 0
        requested = cfg.producer_settings().get("transaction.timeout.ms")
        timeout_s = (
            guarantees.transaction_timeout_ms(
                task_bytes,
                any(f.path.endswith(".gz") for f in source.plan.files),
                rate,
                source.input_bytes / rows if rows else 200.0,
                int(broker_max) if broker_max else guarantees.BROKER_MAX_DEFAULT_MS,
                int(requested) if requested else None,
            )
            / 1000
        )
    return TaskDelivery(
        ordered=source.ordered,
        mode=mode,
        run_id=cfg.run_id,
        lineage=cfg.lineage,
        topic=cfg.topic,
        ledger_topic=None if admin is None else cfg.ledger_topic,
        ledger_conf=conf,
        files=files,
        parts=source.plan.parts,
        parts_by=source.plan.parts_by,
        split_bytes=source.plan.split_bytes,
        transaction_timeout_s=timeout_s,
        kafka_timeout_s=guarantees.kafka_timeout_s(cfg.producer_settings()),
        skip=skip,
        scope=guarantees.scope_prefix(cfg.topic, cfg.lineage, cfg.incremental),
        any_run=cfg.incremental or bool(cfg.resume),
        shuffled=source.shuffled,
        holder=cfg.watch_id or cfg.run_id,
    )


def paced(task_delivery: TaskDelivery, span_s: float, admin: Admin) -> TaskDelivery:
    """A paced task runs as long as its events span, divided by the speed: its transaction
    must stay open that long, within the brokers' maximum."""
    if not task_delivery.transactional or span_s + 60 <= task_delivery.transaction_timeout_s:
        return task_delivery
    broker_max = int(admin.broker_setting("transaction.max.timeout.ms") or guarantees.BROKER_MAX_DEFAULT_MS) / 1000
    needed = span_s * 1.2 + 60
    if needed > broker_max:
        raise UsageError(
            f"--replay-speed: the events span {span_s:,.0f} s at this speed, longer than a transaction may stay open"
            f" (transaction.max.timeout.ms {broker_max:,.0f} s); raise the speed or use --delivery at-least-once"
        )
    return replace(task_delivery, transaction_timeout_s=needed)
