"""Sending, in two steps with the run's plan written between them (so that a killed run
can be resumed): ``set_up``, the topics set up (the data topic, the ledger, a dead-letter
topic), records sized to the topic's limit, what the tasks need to deliver (``Ready``);
then ``send``, the send itself with the broker-side rate sampled, and the topic's settled
offsets read (``Sent``)."""

from __future__ import annotations

import threading
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from pyspark.sql import SparkSession

from kappa_ingest import sinks
from kappa_ingest.config import IngestConfig
from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery import ledger, reconcile
from kappa_ingest.delivery.task_delivery import for_tasks, paced
from kappa_ingest.errors import KafkaUnavailable
from kappa_ingest.kafka import topics
from kappa_ingest.kafka.endpoint import KafkaEndpoint
from kappa_ingest.kafka.settings import connection_conf, kafka_python_connection
from kappa_ingest.kafka.topics import (
    QUERY_TIMEOUT_S,
    Admin,
    TopicConfigRefused,
    TopicShape,
    offsets_if_reachable,
    settled_offsets,
)
from kappa_ingest.pipeline.kept import PRODUCERS_TIMEOUT_S, Kept, Setup, Topics
from kappa_ingest.report.broker_rate import BrokerRateSampler
from kappa_ingest.report.phases import RunClock
from kappa_ingest.report.progress import Progress
from kappa_ingest.sinks.partition_runner import SendOutcome
from kappa_ingest.source import dataframe as csv_source
from kappa_ingest.source import record_size
from kappa_ingest.source.inputs import estimate_rows
from kappa_ingest.source.records import wall_clock_ms
from kappa_ingest.source.splits import Unit
from kappa_ingest.spark.failures import spark_action
from kappa_ingest.spark.job_groups import side_jobs


@dataclass
class Ready:
    """What setting up leaves for the send: the topics ready, their offsets before it, what
    the tasks need to deliver. The report's plan is written from it before anything is sent."""

    source: csv_source.Source  # its parser taking out records too large for the topic
    servers: str
    topics: Topics
    settings: dict[str, str]  # the producers': batches within the topics' limits, the transaction timeout
    conf: dict  # librdkafka settings for the driver's own Kafka clients
    before: dict[int, int]  # the topic's end offsets
    dead_letters_before: dict[int, int]  # the dead-letter topic's (empty without one)
    producers_before: topics.Producers | None  # who wrote to the topic before the run
    task_delivery: delivery.TaskDelivery
    pace_from: int  # a paced replay's first event time (ms)
    estimated_rows: int | None
    admin: Admin
    kept: Kept
    coordinator: threading.Thread | None  # the transaction coordinator being warmed


@dataclass
class Sent:
    """What the sending step leaves: the job's outcome and the topic's offsets around it."""

    outcome: SendOutcome
    task_delivery: delivery.TaskDelivery
    conf: dict  # librdkafka settings for the driver's own Kafka clients
    before: dict[int, int]
    after: dict[int, int] | None  # None: Kafka did not answer after a failed job
    dead_letters: tuple[dict[int, int], dict[int, int]] | None = None  # the dead-letter topic's offsets around it
    producers_before: topics.Producers | None = None  # the topic's producers before it (who else wrote?)
    kept: Kept | None = None  # where the topic's producers after it are kept for the next run
    sampled: list[int] = field(default_factory=list)  # the broker-rate sampler's own readings (offsets totals)
    broker_rate: list[dict] = field(default_factory=list)  # the topic's rate curve, from its offsets
    failure: KafkaUnavailable | None = None  # the job succeeded, and Kafka did not say where the topic ends


def set_up(
    cfg: IngestConfig,
    source: csv_source.Source,
    kafka: KafkaEndpoint,
    kept: Kept,
    skip: frozenset[Unit],
    rate: float | None,
    ledger_start: dict[int, int] | None,
    ledger_checked: int | None = None,
) -> Ready:
    """Set up the topics and read their offsets; what the tasks need; the transaction
    coordinator warmed meanwhile. ``kept``: the driver's Kafka connection and what an
    earlier run of the process found (:mod:`.kept`). ``ledger_start``: where the run's
    reading of the ledger ended (its tasks read on from there); None: from its end now.
    ``ledger_checked``: the data replication the ledger was just found right for (as the
    run took its lock), if it was."""
    servers = kafka.servers()
    asked = cfg.producer_settings()
    conf = connection_conf(asked, servers)
    with ThreadPoolExecutor(2, thread_name_prefix="set-up") as pool:
        source, settings, found, before, producers_before = _ready(cfg, kept, source, asked, servers, pool,
                                                                   ledger_checked)  # fmt: skip
    admin = kept.admin(asked)  # (made again if the set-up found the topic changed)
    estimated = estimate_rows(list(source.files), cfg.header)  # each file's first megabyte read: once
    task_delivery, pace_from = _task_delivery(cfg, admin, source, conf, skip, rate, ledger_start, estimated)
    coordinator = None
    if task_delivery.transactional:
        settings = {**settings, "transaction.timeout.ms": str(int(task_delivery.transaction_timeout_s * 1000))}
        coordinator = kept.warm_coordinator(conf, task_delivery.scope)
    dlq_before = admin.end_offsets(cfg.dead_letter_topic) if cfg.dead_letter_topic else {}
    return Ready(source, servers, found, settings, conf, before, dlq_before, producers_before,
                 task_delivery, pace_from, estimated, admin, kept, coordinator)  # fmt: skip


def send(
    cfg: IngestConfig,
    ready: Ready,
    warming: threading.Thread,
    rate: float | None,
    clock: RunClock,
    echo: bool,
) -> Sent:
    """Once the Python workers and the coordinator are warm, send (the broker-side rate
    sampled meanwhile) and read the settled end offsets."""
    progress = Progress(ready.estimated_rows, quiet=cfg.quiet or not echo)
    warming.join()
    if ready.coordinator is not None:
        ready.coordinator.join(delivery.INIT_TIMEOUT_S)
        ready.kept.coordinator_warm = True
    clock.end("setup")
    task_delivery = ready.task_delivery
    if cfg.replay_speed:  # every task paces from one wall-clock anchor, a second from now
        task_delivery = replace(task_delivery, pace=(ready.pace_from, cfg.replay_speed, wall_clock_ms() + 1000))
    return _sent(cfg, ready, task_delivery, rate, clock, progress)


def _ready(
    cfg: IngestConfig,
    kept: Kept,
    source: csv_source.Source,
    settings: dict[str, str],
    servers: str,
    pool: ThreadPoolExecutor,
    ledger_checked: int | None,
) -> tuple[csv_source.Source, dict[str, str], Topics, dict[int, int], topics.Producers | None]:
    """The topics ready (made, checked, records sized to their limits) and the topic's
    producers (none, of a topic made now: not asked), then its end offsets before the run,
    in that order (a producer that writes after the first reading is seen as another
    writer by the run's reconciliation, its records or not within the offsets). What an
    earlier run of the process found is taken as it is once the topic's shape, asked
    beside its offsets, shows it unchanged."""
    key = (cfg.topic, cfg.ledger_topic, cfg.dead_letter_topic, cfg.topic_partitions, cfg.replication_factor,
           tuple(sorted(cfg.topic_config.items())), cfg.sink, tuple(sorted(settings.items())))  # fmt: skip
    python_conf = kafka_python_connection(settings, servers)
    admin = kept.admin(settings)
    known = kept.setup_for(key)
    if known is not None:
        partitions = known.topics.partitions
        shape = pool.submit(admin.describe, cfg.topic)
        # As the last run saw them at its end (else asked now): who else writes to the topic.
        seen = kept.take_producers(cfg.topic, partitions)
        producers_before = seen if seen is not None else kept.producers(python_conf, cfg.topic, partitions)
        try:  # briefly: a topic deleted since is not one to wait for
            before: dict[int, int] | None = admin.end_offsets(cfg.topic, QUERY_TIMEOUT_S, partitions)
        except KafkaUnavailable:
            before = None
        if shape.result() == TopicShape(partitions, known.topics.replication) and before is not None:
            return size_checked(cfg, source, known.limit), known.settings, known.topics, before, producers_before
        kept.forget()  # deleted, or partitions added, since (or no offsets in a moment): set up again
        admin = kept.admin(settings)
    admin.check_reachable()
    # Meanwhile: the brokers' settings (a created topic's limit, the transactions' timeout),
    # the end offsets' client (asking the ledger: a new topic is not there yet) and the
    # producers' client, each connecting.
    pool.submit(admin.broker_setting, "message.max.bytes")
    admin.warm(cfg.ledger_topic)
    connecting = pool.submit(kept.connect, "producers", python_conf, PRODUCERS_TIMEOUT_S)
    asking = None
    try:
        data_topic = _data_topic(cfg, admin)
        created, shape = data_topic[:2]
        # A topic made just now has had no producer before the run (one that writes to it
        # from now on is another writer); an existing one's are asked beside the checks below.
        if not created:
            futures.wait([connecting])  # one thread at a time on a kept client
            asking = pool.submit(kept.producers, python_conf, cfg.topic, shape.partitions)
        source, settings, limit, found = _topics_ready(cfg, admin, source, settings, ledger_checked, data_topic)
    finally:
        futures.wait([f for f in (connecting, asking) if f is not None])
    kept.setup = Setup(key, limit, settings, replace(found, created=False))
    producers_before = asking.result() if asking is not None else {}
    return source, settings, found, admin.end_offsets(cfg.topic, partitions=found.partitions), producers_before


def _topics_ready(
    cfg: IngestConfig,
    admin: Admin,
    source: csv_source.Source,
    settings: dict[str, str],
    ledger_checked: int | None,
    data_topic: tuple[bool, TopicShape, str | None],
) -> tuple[csv_source.Source, dict[str, str], record_size.Limit, Topics]:
    """The topics the run writes to checked, the data topic made (``data_topic``: what
    :func:`_data_topic` found) and the others made here (the ledger again unless it was just
    found right for the data topic's replication); records sized to the topic's limit (the
    source's parser takes out larger ones) and batches within it."""
    created, shape, note = data_topic
    dlq = cfg.dead_letter_topic

    def ledger_ready() -> None:
        if ledger_checked != shape.replication:
            ledger.ensure(admin, cfg.ledger_topic, shape.replication)
        admin.check_writable(cfg.ledger_topic)

    def dead_letters_ready() -> int:
        assert dlq
        create_topic(admin, dlq, cfg.topic_partitions, cfg.replication_factor, {})
        admin.check_writable(dlq)
        return record_size.topic_max(admin, dlq)

    # The three topics' questions side by side (each a round trip or a few: seconds on a long
    # link, one after the other); their answers, and errors, taken in one order.
    with ThreadPoolExecutor(3, thread_name_prefix="topics") as pool:
        ledger_done = pool.submit(ledger_ready)
        dlq_max = pool.submit(dead_letters_ready) if dlq else None
        topic_writable = pool.submit(admin.check_writable, cfg.topic)
        topic_max = record_size.topic_max(admin, cfg.topic, cfg.topic_config)
        ledger_done.result()  # a ledger not as it must be is said first (exit 2), as before
        topic_writable.result()
        # The producers' batches go to the dead-letter topic too: within its limit as well.
        batch_max = min(topic_max, dlq_max.result()) if dlq_max is not None else topic_max
    limit = record_size.limit(cfg.sink, settings, topic_max)
    source = size_checked(cfg, source, limit)
    settings = record_size.batches_within(settings, cfg.sink, batch_max)
    found = Topics(shape.partitions, shape.replication, limit.bytes, int(settings["batch.size"]), created, note)
    return source, settings, limit, found


def _task_delivery(
    cfg: IngestConfig,
    admin: Admin,
    source: csv_source.Source,
    conf: dict,
    skip: frozenset[Unit],
    rate: float | None,
    ledger_start: dict[int, int] | None,
    rows: int | None,
) -> tuple[delivery.TaskDelivery, int]:
    """What the tasks need to deliver, and (a paced replay) the first event time (ms)."""
    task_delivery = replace(
        for_tasks(cfg, source, admin, conf, skip, rate, rows),
        ledger_start=ledger_start if ledger_start is not None else admin.end_offsets(cfg.ledger_topic),
        dead_letter_topic=cfg.dead_letter_topic,
    )
    pace_from = 0
    if cfg.replay_speed:
        pace_from, span_ms = _event_span(cfg, source)
        task_delivery = paced(task_delivery, span_ms / cfg.replay_speed / 1000, admin)
    return task_delivery, pace_from


def _sent(
    cfg: IngestConfig,
    ready: Ready,
    task_delivery: delivery.TaskDelivery,
    rate: float | None,
    clock: RunClock,
    progress: Progress,
) -> Sent:
    """The send itself, the broker-side rate sampled meanwhile; then the settled offsets
    (of the dead-letter topic too), or after a failed job whatever Kafka answers quickly."""
    admin, before = ready.admin, ready.before
    sampler = BrokerRateSampler(ready.servers, cfg.topic, ready.settings, on_sample=progress.update).start(first=before)
    after: dict[int, int] | None = None
    dead_letters = None
    failure = None
    connecting = None
    if task_delivery.transactional and ready.producers_before is not None:  # the reconciliation's client, meanwhile
        admin_conf = kafka_python_connection(cfg.producer_settings(), ready.servers)
        connecting = threading.Thread(target=ready.kept.connect, name="transactions-client",
                                      args=("transactions", admin_conf, delivery.ABORT_TIMEOUT_S))  # fmt: skip
        connecting.start()
    try:
        try:
            outcome = sinks.send(cfg.sink, ready.source, ready.settings, ready.servers, task_delivery, rate)
        finally:
            clock.end("sending")
            progress.close()
            sampler.halt()  # its readings, then the settled offsets: other writers' records lie beyond them
        if outcome.error is None:
            sent = sum(st.rows_sent for st in outcome.stats)
            expected = reconcile.expected_growth(sent, [st.markers for st in outcome.stats if st.transactions])
            try:
                after = settled_offsets(admin, cfg.topic, before, expected or sent)
                if cfg.dead_letter_topic:
                    dead_letters = (ready.dead_letters_before, admin.end_offsets(cfg.dead_letter_topic))
            except KafkaUnavailable as e:  # the run fails (exit 4), its report with the curve so far
                after, dead_letters, failure = None, None, e
        else:
            after = offsets_if_reachable(admin, cfg.topic)
    finally:
        # Its last sample is the settled offsets: commit markers follow a commit.
        curve = sampler.stop(last=after)
        if connecting is not None:
            connecting.join()  # one thread at a time on a kept client
    return Sent(outcome, task_delivery, ready.conf, before, after, dead_letters, ready.producers_before, ready.kept,
                list(sampler.readings), curve, failure)  # fmt: skip


def _data_topic(cfg: IngestConfig, admin: Admin) -> tuple[bool, TopicShape, str | None]:
    """Create the topic as asked (with room for large batches), or say how the existing one
    differs from what was asked: whether this run created it, its shape, the difference."""
    created = create_topic(admin, cfg.topic, cfg.topic_partitions, cfg.replication_factor, cfg.topic_config)
    shape = admin.describe(cfg.topic, created=True)  # made just now, or seen (by a broker that may not be this one)
    if shape is None:  # deleted meanwhile, or its creation not yet known to the broker asked
        raise KafkaUnavailable(f"topic {cfg.topic}: not found right after it was made or seen; run again")
    note = None
    if not created and (shape.partitions, shape.replication) != (cfg.topic_partitions, cfg.replication_factor):
        note = (
            f"topic {cfg.topic} existed with {shape.partitions} partitions and replication {shape.replication}:"
            " --topic-partitions and --replication-factor apply to a topic the run creates"
        )
    return created, shape, note


def create_topic(admin: Admin, topic: str, partitions: int, replication: int, config: dict[str, str]) -> bool:
    """Create ``topic`` if absent, with ``config`` and room for the sink's batches (the brokers'
    limit is asked only then; a managed cluster that refuses that room gives its own at most);
    True if this call created it."""
    if admin.partitions(topic) is not None:
        return False
    broker_max = int(admin.broker_setting("message.max.bytes") or record_size.BROKER_MAX_DEFAULT)
    roomy = record_size.created_topic_config(config, broker_max)
    try:
        return admin.ensure_topic(topic, partitions, replication, roomy, seen_absent=True)
    except TopicConfigRefused:
        if roomy == config:  # the user's own configs: refused as they are
            raise
    # Confluent Cloud takes 8 MiB at most (a policy violation above it): batches follow the topic.
    managed = record_size.created_topic_config(config, broker_max, record_size.MANAGED_ROOM)
    return admin.ensure_topic(topic, partitions, replication, managed, seen_absent=True)


def size_checked(cfg: IngestConfig, source: csv_source.Source, limit: record_size.Limit) -> csv_source.Source:
    """The source, its parser taking out rows whose record is over ``limit`` (quarantined,
    or with --strict-size failing the run)."""
    checked = record_size.SizeChecked(source.parser, source.spec, limit, record_size.header_bytes(cfg.run_id, cfg.sink),
                                      cfg.strict_size)  # fmt: skip
    return replace(source, parser=checked)


def _event_span(cfg: IngestConfig, source: csv_source.Source) -> tuple[int, int]:
    """The first event time and the span to the last (ms): where --replay-speed paces from."""
    from pyspark.sql import functions as F

    with side_jobs(cfg, "pace", "the events' time span"):
        us = source.event_micros()
        row = spark_action(lambda: source.df.agg(F.min(us).alias("a"), F.max(us).alias("b")).collect()[0])
    if row["a"] is None:
        return 0, 0
    first, last = row["a"] // 1000, row["b"] // 1000
    return first, last - first


def rate_per_task(cfg: IngestConfig, spark: SparkSession, source: csv_source.Source) -> float | None:
    """The job-wide --target-rate split over the tasks that run at once."""
    if cfg.target_rate is None:
        return None
    concurrent = max(1, min(source.tasks, spark.sparkContext.defaultParallelism))
    return cfg.target_rate / concurrent
