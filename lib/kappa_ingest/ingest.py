"""The ingest job: CSV files → JSON records → a Kafka topic, measured and reconciled.

    resumption = resume.prepare(cfg, ...)            # --resume: fence, read the ledger
    selection  = incremental.prepare(cfg, ...)       # --incremental: what the ledger lacks
    source     = csv_source.read(spark, cfg, ...)    # the planned units; rows to parse
    sent       = _send(...)                          # convert + produce, per partition
    report.add_run(sent.outcome.stats, spark_metrics.collect(...))
    _account(...)                                    # units committed, missing, to the ledger
    _reconcile(...)                                  # the topic holds what was sent
    _record(...)                                     # summary.json, the Delta tables

Whatever happens, ``summary.json`` is written with the run's status (first before sending,
with the run's plan, so that a killed run can be resumed), and the run's clock
(``phases``) says where the time went from the command's start.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from confluent_kafka import KafkaException
from pyspark import SparkContext
from pyspark.sql import SparkSession

from kappa_ingest import (
    broker_rate,
    csv_source,
    delivery,
    incremental,
    ledger,
    lock,
    metrics_store,
    quarantine,
    reconcile,
    record_size,
    sinks,
    spark_metrics,
    topics,
    warmup,
)
from kappa_ingest.broker_rate import BrokerRateSampler
from kappa_ingest.config import IngestConfig
from kappa_ingest.errors import InputError, KafkaUnavailable, KappaError, LockLost, QualityGateFailed, UsageError
from kappa_ingest.failures import classify, spark_action
from kappa_ingest.incremental import Selection
from kappa_ingest.kafka_endpoint import KafkaEndpoint, endpoint_for
from kappa_ingest.kafka_settings import connection_conf, kafka_python_connection
from kappa_ingest.ledger import Entry
from kappa_ingest.lock import Lock
from kappa_ingest.phases import RunClock
from kappa_ingest.progress import Progress, estimate_rows
from kappa_ingest.records import wall_clock_ms
from kappa_ingest.report import RunReport, render
from kappa_ingest.reprocess import Replay
from kappa_ingest.resume import Resumption
from kappa_ingest.sinks.partition_runner import SendOutcome, TaskStats, run_partitions
from kappa_ingest.sinks.producer import Discard
from kappa_ingest.splits import Plan, Unit
from kappa_ingest.topics import Admin

FAILED_RUN_OFFSETS_TIMEOUT_S = 3.0


@dataclass
class Sent:
    """What the sending step leaves: the job's outcome and the topic's offsets around it."""

    outcome: SendOutcome
    task_delivery: delivery.TaskDelivery
    conf: dict  # librdkafka settings for the driver's own Kafka clients
    before: dict[int, int]
    after: dict[int, int] | None  # None: Kafka did not answer after a failed job
    dead_letters: tuple[dict[int, int], dict[int, int]] | None = None  # the dead-letter topic's offsets around it
    source: csv_source.Source | None = None  # what was sent: the source, its parser checking record sizes
    producers_before: topics.Producers | None = None  # the topic's producers before it (who else wrote?)


def ingest(
    cfg: IngestConfig,
    spark: SparkSession,
    echo: bool = True,
    *,
    clock: RunClock | None = None,
    kafka: KafkaEndpoint | None = None,
    release: Callable[[], None] | None = None,
    resumption: Resumption | None = None,
    selection: Selection | None = None,
    held: Lock | None = None,
    replay: Replay | None = None,
) -> RunReport:
    """Run one ingest; returns its report (also recorded, written to summary.json and printed).

    ``clock`` has the command's start (default: now); ``kafka`` the run's Kafka (default:
    from ``cfg``, started here if need be); ``release`` is called once the run needs Spark
    and Kafka no more, before recording (the CLI stops both there, so that the user does
    not wait for them after the report); ``resumption`` is ``resume.prepare``'s answer for a
    ``--resume`` run (made here if not given), ``selection`` ``incremental.prepare``'s for an
    ``--incremental`` one (likewise); ``held`` the topic's lock (taken here if not given, and
    then released at the end); ``replay`` what a ``reprocess`` run replays (``reprocess.prepare``). Raises a KappaError subclass (carrying the contract's exit
    code) on failure, after the report has been written with ``status: failed``.
    """
    clock = clock or RunClock()
    clock.end("startup")
    owns_kafka = kafka is None
    owns_lock = held is None and not cfg.dry_run
    if owns_lock:
        try:
            kafka = kafka or endpoint_for(cfg, spark.sparkContext.master)
            held = lock.hold(cfg, kafka.servers())
        except BaseException as e:
            if owns_kafka and kafka is not None:
                kafka.close()
            failed_report(cfg, clock, e)
            raise
    try:
        return _ingest(cfg, spark, echo, clock, kafka, owns_kafka, release, resumption, selection, held, replay)
    finally:
        if owns_lock and held is not None:
            held.release()


def _ingest(
    cfg: IngestConfig,
    spark: SparkSession,
    echo: bool,
    clock: RunClock,
    kafka: KafkaEndpoint | None,
    owns_kafka: bool,
    release: Callable[[], None] | None,
    resumption: Resumption | None,
    selection: Selection | None,
    held: Lock | None,
    replay: Replay | None = None,
) -> RunReport:
    if cfg.resume and resumption is None:
        try:
            resumption = prepare_resume(cfg)
        except BaseException as e:
            failed_report(cfg, clock, e)
            raise
    if resumption is not None and resumption.nothing_left:
        if held is not None:
            held.release()
        return nothing_to_send(cfg, resumption, clock, echo, held)
    if cfg.incremental and selection is None:
        try:
            kafka = kafka or endpoint_for(cfg, spark.sparkContext.master)
            selection = prepare_incremental(cfg, kafka.servers())
        except BaseException as e:
            if owns_kafka and kafka is not None:
                kafka.close()
            failed_report(cfg, clock, e)
            raise
    if selection is not None and selection.nothing_left:
        servers = kafka.servers() if kafka else ""
        if held is not None:
            held.release()
        if owns_kafka and kafka is not None:
            kafka.close()
        return nothing_new(cfg, selection, servers, clock, echo, held)
    report = new_report(cfg, clock, held)
    report.spark_master = spark.sparkContext.master
    if replay is not None:
        report.reprocess = replay.to_json()
    run_dir = f"{cfg.metrics_dir}/runs/{cfg.run_id}"
    new_entries: list[Entry] = []
    unreconciled: KappaError | None = None
    try:
        kafka = kafka or endpoint_for(cfg, spark.sparkContext.master)
        delivery.check_spark(cfg.delivery, spark.sparkContext.getConf().get("spark.speculation", "false"))
        if resumption is not None:
            add_resumption(report, resumption)
        if selection is not None:
            add_selection(report, selection)
        warming = warmup.start(spark, cfg.sink)  # overlaps reading the header and setting up Kafka
        if resumption is not None:
            source = csv_source.read(spark, cfg, resumption.plan, resumption.paths)
        elif selection is not None:
            source = csv_source.read(spark, cfg, selection.plan, selection.paths)
        else:
            source = csv_source.read(spark, cfg)
        report.read_path = source.mode
        report.plan = source.plan.to_json()
        sc = spark.sparkContext
        group = _job_group(cfg)
        if held is not None:  # another run took the topic over: stop sending at once (exit 6 below)
            held.on_lost(lambda _reason: sc.cancelJobGroup(group))
        rate = _rate_per_task(cfg, spark, source)
        earlier = resumption or selection  # what was delivered before, and the files to read
        skip = frozenset(earlier.delivered) if earlier else frozenset()
        if cfg.expectations:
            source = _quality_gate(cfg, source, skip, report, run_dir, echo)
        if cfg.dry_run:
            warming.join()
            clock.end("setup")
            spark_metrics.warm(spark)
            task_delivery = _task_delivery(cfg, source, None, {}, skip)
            # The producer's limit only: a dry run asks Kafka nothing.
            source = _size_checked(cfg, source, record_size.limit(cfg.sink, cfg.producer_settings(), None))
            outcome = run_partitions(source.df, source.spec, source.parser, lambda _: Discard(), task_delivery, rate)
            clock.end("sending")
            sent = None
        else:
            sent = _send(
                cfg, spark, source, kafka, report, warming, rate, echo, skip, earlier.ledger_end if earlier else None
            )
            source = sent.source or source  # its parser also takes out records too large for Kafka
            outcome = sent.outcome
        inherited, elsewhere = _inherited(cfg.run_id, outcome.stats)
        if sent is not None and outcome.error is not None:
            inherited += _committed_by_failed_tasks(cfg, sent, outcome.stats, inherited)
        report.add_run(outcome.stats, spark_metrics.collect(spark, group), inherited)
        report.add_headers(source.headers, outcome.stats, inherited)
        if elsewhere:  # found committed by another run of the scope while this one ran: not sent by it
            report.delivery["delivered_by_other_runs"] = {"units": len(elsewhere), "rows": sum(e.rows_sent for e in elsewhere),
                                                          "runs": sorted({e.run_id for e in elsewhere})}  # fmt: skip
        if report.quality and report.quality["gate"] == "quarantine":
            report.add_quality_counts(outcome.stats)
        if sent is not None:
            new_entries = _account(cfg, report, source.plan, sent, inherited, elsewhere, earlier)
        changed = changed_input(source, cfg.run_id)  # a file that changed while read: not all of it was sent
        if held is not None and held.lost is not None:
            raise LockLost(f"{held.lost}; what it committed is in the topic once, and the other run (or the next"
                           " --incremental run) sends the rest")  # fmt: skip
        if outcome.error is not None:
            if sent is not None and sent.after is not None:
                report.add_offsets(sent.before, sent.after)
            if changed is not None:
                raise changed from outcome.error
            raise _with_resume_hint(classify(outcome.error), report) from outcome.error
        if sent is not None:
            _reconcile(cfg, report, sent, resumption, new_entries)
            if replay is not None:
                _compare(cfg, report, replay, sent)
        if changed is not None:  # after the reconciliation: the report still says what the topic holds
            raise changed
        taken = [u for st in outcome.stats for u in st.taken_units()]
        if taken:
            raise LockLost(
                f"{len(taken)} split(s) of this run were taken over by another run writing to {cfg.topic} (its"
                f" transactions fenced this run's: {taken[0].label()}{' ...' if len(taken) > 1 else ''}) and not"
                " committed by it within a minute; nothing of them was sent twice: run again with --incremental,"
                " or --resume, once the other run is over"
            )
        if report.rows_quarantined:
            path = f"{run_dir}/quarantine"
            reasons = spark_action(lambda: quarantine.write(source, path, skip))
            report.quarantine = {"rows": sum(reasons.values()), "path": path, "reasons": reasons}
            report.check("quarantine holds every quarantined row", report.quarantine["rows"] == report.rows_quarantined,
                         report.rows_quarantined, report.quarantine["rows"])  # fmt: skip
        report.check_counts()
        report.status = "succeeded" if report.consistent else "failed"
        if not report.consistent:
            unreconciled = _reconciliation_error(report, report.path(cfg.metrics_dir))
            report.error = str(unreconciled)
        sc.setJobGroup(None, None)  # type: ignore[arg-type]
    except KappaError as e:
        report.status, report.error = e.status, str(e)
        raise
    except KafkaException as e:  # a driver-side Kafka call not wrapped where it was made
        unavailable = KafkaUnavailable(f"Kafka did not answer the driver: {e.args[0].str()}; check the brokers")
        report.status, report.error = unavailable.status, str(unavailable)
        raise unavailable from e
    except Exception as e:
        report.status, report.error = "failed", f"{type(e).__name__}: {_first_line(e)}"
        raise
    finally:
        clock.end("reconcile")  # a failed run's last phase takes its time up to here
        if held is not None:
            held.release()  # while Kafka is still there: an embedded broker stops next
            report.delivery["lock"] = held.summary()
        releasing = threading.Thread(target=_release, args=(release, kafka if owns_kafka else None), name="release")
        releasing.start()  # Spark and Kafka stop while the store is written
        path = _record(cfg, report, releasing, new_entries)
        if echo:
            print(render(report.summary()))
            print(f"report: {path}")
    if unreconciled is not None:
        raise unreconciled
    return report


def new_report(cfg: IngestConfig, clock: RunClock, held: Lock | None = None) -> RunReport:
    report = RunReport(cfg.run_id, cfg.sink, cfg.topic, cfg.masked(), clock=clock, dry_run=cfg.dry_run)
    report.counted_by = "dry run: rows converted, none sent" if cfg.dry_run else sinks.COUNTED_BY[cfg.sink]
    report.delivery = {"mode": cfg.delivery, "lineage": cfg.lineage, "resumed_from": cfg.resume,
                       "splits_skipped": 0, "rows_skipped": 0, "transactions_committed": 0,
                       "transactions_aborted": 0}  # fmt: skip
    if held is not None:
        report.delivery["lock"] = held.summary()
    return report


def prepare_resume(cfg: IngestConfig) -> Resumption:
    """Fence and read the ledger for a --resume run (its Kafka is the original run's)."""
    from kappa_ingest import resume

    assert cfg.bootstrap_servers, "a resumed run's Kafka comes from the run it resumes"
    return resume.prepare(cfg, connection_conf(cfg.producer_settings(), cfg.bootstrap_servers))


def failed_report(cfg: IngestConfig, clock: RunClock, e: BaseException) -> Path:
    """The report of a run that failed before it had one of its own."""
    error = str(e) if isinstance(e, KappaError) else f"{type(e).__name__}: {_first_line(e)}"
    report = new_report(cfg, clock)
    report.status, report.error = "failed", error
    return report.finish(cfg.metrics_dir)


def prepare_incremental(cfg: IngestConfig, servers: str) -> Selection:
    """Read the ledger for an --incremental run and choose what it sends."""
    return incremental.prepare(cfg, connection_conf(cfg.producer_settings(), servers))


def add_selection(report: RunReport, s: Selection) -> None:
    report.incremental = s.summary
    report.delivery.update(splits_skipped=len(s.delivered), rows_skipped=sum(e.rows_sent for e in s.delivered.values()))


def nothing_new(
    cfg: IngestConfig, s: Selection, servers: str, clock: RunClock, echo: bool = True, held: Lock | None = None
) -> RunReport:
    """An incremental run with nothing new to send: its report, without Spark."""
    clock.end("sending")
    report = new_report(cfg, clock, held)
    add_selection(report, s)
    report.bootstrap_servers = servers
    report.status, report.error = "succeeded", None
    path = _record(cfg, report, None, [])
    if echo:
        print(render(report.summary()))
        done, left = s.summary["files_delivered_before"], s.summary["files_left"]
        why = f"all {done:,} input files are already delivered to {cfg.topic}" if not left else "nothing selected"
        print(f"sent 0 rows: {why} (the ledger {cfg.ledger_topic})")
        print(f"report: {path}")
    return report


def add_resumption(report: RunReport, r: Resumption) -> None:
    report.delivery.update(resumed_from=r.resumed_from, splits_skipped=len(r.delivered), rows_skipped=r.rows_skipped)


def nothing_to_send(
    cfg: IngestConfig, r: Resumption, clock: RunClock, echo: bool = True, held: Lock | None = None
) -> RunReport:
    """A resumed run whose every unit is delivered: its report, without Spark."""
    clock.end("sending")
    report = new_report(cfg, clock, held)
    add_resumption(report, r)
    report.plan = r.plan.to_json()
    report.bootstrap_servers = cfg.bootstrap_servers
    report.ledger = {"topic": cfg.ledger_topic, "units": len(r.plan.units()), "delivered_before": len(r.delivered),
                     "committed": [], "missing": []}  # fmt: skip
    report.status = "succeeded"
    report.error = None
    path = _record(cfg, report, None, [])
    if echo:
        print(render(report.summary()))
        print(f"sent 0 rows: all {len(r.delivered):,} splits of run {r.resumed_from} were already delivered")
        print(f"report: {path}")
    return report


def _task_delivery(
    cfg: IngestConfig, source: csv_source.Source, admin: Admin | None, conf: dict, skip: frozenset[Unit], rate=None
) -> delivery.TaskDelivery:
    """What the tasks need to deliver; for exactly-once, with a transaction timeout sized
    to the longest transaction (a unit's, or over shuffled input a task's) and checked
    against the brokers' maximum."""
    files = {f.path: (f.size, f.mtime_ms) for f in source.plan.files}
    mode = cfg.delivery if admin is not None else delivery.AT_LEAST_ONCE  # a dry run has no transactions
    timeout_s = 60.0
    if admin is not None and cfg.delivery == delivery.EXACTLY_ONCE:
        broker_max = admin.broker_setting("transaction.max.timeout.ms")
        tasks = max(1, source.tasks)
        largest = max((f.size for f in source.plan.files), default=0)
        task_bytes = min(largest, source.plan.split_bytes)
        if source.shuffled:
            task_bytes = max(task_bytes, -(-source.input_bytes // tasks))
        rows = estimate_rows(list(source.files), cfg.header) or 0
        requested = cfg.producer_settings().get("transaction.timeout.ms")
        timeout_s = (
            delivery.transaction_timeout_ms(
                task_bytes,
                any(f.path.endswith(".gz") for f in source.plan.files),
                rate,
                source.input_bytes / rows if rows else 200.0,
                int(broker_max) if broker_max else delivery.BROKER_MAX_DEFAULT_MS,
                int(requested) if requested else None,
            )
            / 1000
        )
    return delivery.TaskDelivery(
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
        kafka_timeout_s=delivery.kafka_timeout_s(cfg.producer_settings()),
        skip=skip,
        scope=delivery.scope_prefix(cfg.topic, cfg.lineage, cfg.incremental),
        incremental=cfg.incremental,
        shuffled=source.shuffled,
    )


def _job_group(cfg: IngestConfig) -> str:
    """Put the driver's next Spark jobs in the run's job group (the report joins its jobs'
    tasks with the producers' counts); returns its id."""
    group = f"kappa-ingest-{cfg.run_id}"
    SparkContext.getOrCreate().setJobGroup(group, f"kappa-ingest {cfg.run_id}: {cfg.sink} -> {cfg.topic}")
    return group


@contextmanager
def _side_jobs(cfg: IngestConfig, name: str, what: str) -> Iterator[None]:
    """Jobs beside the sending (the quality gate, the pacing's span) in a group of their
    own, so that the report's counts of the run's tasks stay the sending's."""
    SparkContext.getOrCreate().setJobGroup(f"kappa-ingest-{cfg.run_id}-{name}", f"kappa-ingest {cfg.run_id}: {what}")
    try:
        yield
    finally:
        _job_group(cfg)


def _event_span(cfg: IngestConfig, source: csv_source.Source) -> tuple[int, int]:
    """The first event time and the span to the last (ms): where --replay-speed paces from."""
    from pyspark.sql import functions as F

    with _side_jobs(cfg, "pace", "the events' time span"):
        us = source.event_micros()
        row = spark_action(lambda: source.df.agg(F.min(us).alias("a"), F.max(us).alias("b")).collect()[0])
    if row["a"] is None:
        return 0, 0
    first, last = row["a"] // 1000, row["b"] // 1000
    return first, last - first


def _paced(task_delivery: delivery.TaskDelivery, span_s: float, admin: Admin) -> delivery.TaskDelivery:
    """A paced task runs as long as its events span, divided by the speed: its transaction
    must stay open that long, within the brokers' maximum."""
    if not task_delivery.transactional or span_s + 60 <= task_delivery.transaction_timeout_s:
        return task_delivery
    broker_max = int(admin.broker_setting("transaction.max.timeout.ms") or delivery.BROKER_MAX_DEFAULT_MS) / 1000
    needed = span_s * 1.2 + 60
    if needed > broker_max:
        raise UsageError(
            f"--replay-speed: the events span {span_s:,.0f} s at this speed, longer than a transaction may stay open"
            f" (transaction.max.timeout.ms {broker_max:,.0f} s); raise the speed or use --delivery at-least-once"
        )
    return replace(task_delivery, transaction_timeout_s=needed)


def _compare(cfg: IngestConfig, report: RunReport, replay: Replay, sent: Sent) -> None:
    """The old topic's records of the replayed runs beside the new topic's of this run."""
    from kappa_ingest import reprocess

    with Admin(sent.conf["bootstrap.servers"], cfg.producer_settings()) as admin:
        sides = reprocess.compare(admin, sent.conf, replay.from_topic, replay.runs, cfg.topic, cfg.run_id)
        doomed = reprocess.past_retention(admin, cfg.topic, sides["new"]["first_event"], wall_clock_ms())
    assert report.reprocess is not None
    report.reprocess["compare"] = sides
    if doomed:  # a replay that succeeds and whose records the broker then deletes must say so
        report.reprocess["retention_warning"] = doomed
        print(f"kappa-ingest: warning: {doomed}", file=sys.stderr)
    new = sides["new"]["records"]
    report.check("the new topic holds rows_sent records of this run (read_committed)", new == report.rows_sent,
                 report.rows_sent, new)  # fmt: skip


def _quality_gate(
    cfg: IngestConfig, source: csv_source.Source, skip: frozenset[Unit], report: RunReport, run_dir: str, echo: bool
) -> csv_source.Source:
    """Validate every row the run will send with the suite, before anything is sent: a
    failure that gates stops the run (exit 5); in quarantine mode the source's parser also
    takes out the rows failing row-level expectations."""
    from kappa_ingest import quality

    suite = quality.load(str(cfg.expectations))
    with _side_jobs(cfg, "quality", "data-quality gate"):
        frame = quality.parsed_frame(source, suite, skip)
        outcome = quality.validate(frame, suite, str(cfg.quality_gate), f"{run_dir}/data_docs")
    report.quality = outcome.to_json()
    if echo:
        for r in outcome.results:
            if not r["success"]:
                print(f"  {quality.failure_line(r)}", file=sys.stderr)
    failures = outcome.gating_failures()
    if failures:
        labels = ", ".join(r["label"] for r in failures)
        raise QualityGateFailed(
            f"data-quality gate failed: {len(failures)} of {len(suite.expectations)} expectations of suite"
            f" {suite.name!r} ({labels}); nothing sent"
        )
    if cfg.quality_gate == "quarantine":
        return replace(source, parser=quality.Checked(source.parser, quality.RowChecks.of(suite)))
    return source


def _send(
    cfg: IngestConfig,
    spark: SparkSession,
    source: csv_source.Source,
    kafka: KafkaEndpoint,
    report: RunReport,
    warming: threading.Thread,
    rate: float | None,
    echo: bool,
    skip: frozenset[Unit],
    ledger_start: dict[int, int] | None,
) -> Sent:
    """Set up the topics, write the run's plan, send, and read the settled end offsets.
    ``ledger_start``: where the run's reading of the ledger ended (its tasks read on from
    there); None: from its end now."""
    servers = kafka.servers()
    report.bootstrap_servers = servers
    report.broker["embedded"] = kafka.embedded
    settings = cfg.producer_settings()
    conf = connection_conf(settings, servers)
    with Admin(servers, settings) as admin:
        admin.check_reachable()
        _data_topic(cfg, admin, report)
        ledger.ensure(admin, cfg.ledger_topic, report.broker["topic_replication"])
        dlq = cfg.dead_letter_topic
        if dlq:
            admin.ensure_topic(dlq, cfg.topic_partitions, cfg.replication_factor)
        topic_max = record_size.topic_max(admin, cfg.topic, cfg.topic_config)
        limit = record_size.limit(cfg.sink, settings, topic_max)
        source = _size_checked(cfg, source, limit)
        report.broker["max_record_bytes"] = limit.bytes
        settings = _batches_within(settings, cfg.sink, topic_max)
        for writes_to in (cfg.topic, cfg.ledger_topic, *([dlq] if dlq else [])):
            admin.check_writable(writes_to)
        task_delivery = replace(
            _task_delivery(cfg, source, admin, conf, skip, rate),
            ledger_start=ledger_start if ledger_start is not None else admin.end_offsets(cfg.ledger_topic),
            dead_letter_topic=dlq,
        )
        pace_from = 0
        if cfg.replay_speed:
            pace_from, span_ms = _event_span(cfg, source)
            task_delivery = _paced(task_delivery, span_ms / cfg.replay_speed / 1000, admin)
        if task_delivery.transactional:
            settings = {**settings, "transaction.timeout.ms": str(int(task_delivery.transaction_timeout_s * 1000))}
            warming_coordinator = delivery.warm_coordinator(conf, task_delivery.scope)
        tasks = source.tasks
        report.delivery.update(tasks=tasks, ledger_topic=cfg.ledger_topic)
        if task_delivery.transactional:
            per = "p:<parts>:<part>" if task_delivery.shuffled else "u:<unit digest>"
            report.delivery.update(
                transactional_ids=f"{task_delivery.scope}{per}",
                transaction_timeout_ms=int(task_delivery.transaction_timeout_s * 1000),
            )
        before = admin.end_offsets(cfg.topic)
        producers_before = topics.producers(kafka_python_connection(settings, servers), cfg.topic, len(before))
        dlq_before = admin.end_offsets(dlq) if dlq else {}
        report.add_offsets(before, before)
        report.write(cfg.metrics_dir)  # the run's plan, before anything is sent: --resume starts from it
        progress = Progress(estimate_rows(list(source.files), cfg.header), quiet=cfg.quiet or not echo)
        warming.join()
        if task_delivery.transactional:
            warming_coordinator.join(delivery.INIT_TIMEOUT_S)
        report.clock.end("setup")
        spark_metrics.warm(spark)
        sampler = BrokerRateSampler(servers, cfg.topic, settings, on_sample=progress.update).start()
        after: dict[int, int] | None = None
        dead_letters = None
        if cfg.replay_speed:  # every task paces from one wall-clock anchor, a second from now
            task_delivery = replace(task_delivery, pace=(pace_from, cfg.replay_speed, wall_clock_ms() + 1000))
        try:
            try:
                outcome = sinks.send(cfg.sink, source, settings, servers, task_delivery, rate)
            finally:
                report.clock.end("sending")
                progress.close()
            if outcome.error is None:
                sent = sum(st.rows_sent for st in outcome.stats)
                expected = reconcile.expected_growth(sent, [st.markers for st in outcome.stats if st.transactions])
                after = _settled_offsets(admin, cfg.topic, before, expected or sent)
                if dlq:
                    dead_letters = (dlq_before, admin.end_offsets(dlq))
            else:
                after = _offsets_if_reachable(admin, cfg.topic)
        finally:
            # Its last sample is the settled offsets: commit markers follow a commit.
            report.broker_rate = sampler.stop(last=after)
    return Sent(outcome, task_delivery, conf, before, after, dead_letters, source, producers_before)


def _data_topic(cfg: IngestConfig, admin: Admin, report: RunReport) -> None:
    """Create the topic as asked, or say how the existing one differs from what was asked."""
    if admin.ensure_topic(cfg.topic, cfg.topic_partitions, cfg.replication_factor, cfg.topic_config):
        report.broker["topic_created"] = True
    shape = admin.describe(cfg.topic)
    assert shape is not None, f"topic {cfg.topic} exists"
    report.broker.update(topic_partitions=shape.partitions, topic_replication=shape.replication)
    if not report.broker.get("topic_created") and (shape.partitions, shape.replication) != (
        cfg.topic_partitions, cfg.replication_factor,
    ):  # fmt: skip
        report.broker["topic_note"] = (
            f"topic {cfg.topic} existed with {shape.partitions} partitions and replication {shape.replication}:"
            " --topic-partitions and --replication-factor apply to a topic the run creates"
        )


def _size_checked(cfg: IngestConfig, source: csv_source.Source, limit: record_size.Limit) -> csv_source.Source:
    """The source, its parser taking out rows whose record is over ``limit`` (quarantined,
    or with --strict-size failing the run)."""
    checked = record_size.SizeChecked(source.parser, source.spec, limit, record_size.header_bytes(cfg.run_id, cfg.sink),
                                      cfg.strict_size)  # fmt: skip
    return replace(source, parser=checked)


# Each client's default batch.size: a batch larger than the topic's max.message.bytes is refused whole.
_BATCH_SIZE_DEFAULT = {"confluent": 1_000_000, "kafka-python": 16_384, "spark": 16_384}


def _batches_within(settings: dict[str, str], sink: str, topic_max: int) -> dict[str, str]:
    """The producer settings with batch.size within the topic's max.message.bytes: a batch
    of small records larger than that is refused by the broker (librdkafka does not split it)."""
    batch = int(settings.get("batch.size", _BATCH_SIZE_DEFAULT[sink]))
    ceiling = max(1, topic_max - record_size.FRAMING_BYTES)
    return {**settings, "batch.size": str(ceiling)} if batch > ceiling else settings


def changed_input(source: csv_source.Source, run_id: str) -> InputError | None:
    """The first local input file whose size or modification time is no longer the plan's
    (or that is gone): it changed while the run read it, so what was sent of it may be
    incomplete or mixed. Remote files are not checked."""
    for planned, now in source.plan.changed():
        if now is None:
            what = "deleted or moved"
        elif now[0] != planned.size:
            what = f"size {planned.size:,} -> {now[0]:,} bytes"
        else:
            what = f"modified {now[1] - planned.mtime_ms:,} ms after it was planned, same size"
        return InputError(
            f"input {planned.path} changed while the run read it ({what}): its rows in the topic (run_id {run_id})"
            " may be incomplete or mixed; send it again once nothing writes to it"
            " (with --incremental: --on-changed resend)"
        )
    return None


def _inherited(run_id: str, stats: list[TaskStats]) -> tuple[list[Entry], list[Entry]]:
    """Units tasks found committed when they came to send them, once each: by attempts of
    this run Spark counted as failed (their rows are this run's), and by other runs."""
    out: dict[Unit, Entry] = {}
    for s in stats:
        for e in s.inherited_entries():
            out.setdefault(e.unit, e)
    own = [e for e in out.values() if e.run_id == run_id]
    return own, [e for e in out.values() if e.run_id != run_id]


def _committed_by_failed_tasks(
    cfg: IngestConfig, sent: Sent, stats: list[TaskStats], known: list[Entry]
) -> list[Entry]:
    """After a failed job, the units its failed tasks committed before they failed (a task
    holds several): the ledger's entries of this run that no successful task reported.
    Their rows are in the topic, so in the report. Nothing if Kafka does not answer now."""
    topic = sent.task_delivery.ledger_topic
    if topic is None or sent.after is None:
        return []
    seen = {e.unit for s in stats for e in s.entries()} | {e.unit for e in known}
    try:
        entries = ledger.read(sent.conf, topic, timeout_s=10.0)
    except KappaError:
        return []
    found: dict[Unit, Entry] = {}
    for e in entries:
        if e.run_id == cfg.run_id and e.topic == cfg.topic and e.unit not in seen:
            found[e.unit] = e
    return list(found.values())


def _account(
    cfg: IngestConfig,
    report: RunReport,
    plan: Plan,
    sent: Sent,
    inherited: list[Entry],
    elsewhere: list[Entry],
    earlier: Resumption | Selection | None,
) -> list[Entry]:
    """Which units this run delivered and which are missing; the ledger entries the driver
    writes itself (the Spark sink's; after a successful job, units no row begins in).
    Returns this run's entries, for the ledger's Delta copy."""
    outcome = sent.outcome
    entries = [e for s in outcome.stats for e in s.entries()]
    seen = {e.unit for e in entries} | {e.unit for e in inherited} | {e.unit for e in elsewhere}
    taken = {u for s in outcome.stats for u in s.taken_units()}  # rows in them, another writer's to commit
    before = earlier.delivered if earlier else {}
    planned = plan.units()
    unplanned = sorted(seen - set(planned))
    report.check("every split Spark read is one the run planned", not unplanned, 0, len(unplanned))
    read_files = {f.path for f in plan.files} if earlier is None else set(earlier.paths)
    empty: list[Entry] = []
    if outcome.error is None:
        files = {f.path: f for f in plan.files}
        empty = [
            Entry(
                cfg.topic,
                u,
                files[u.file].size,
                files[u.file].mtime_ms,
                cfg.run_id,
                cfg.lineage,
                cfg.delivery,
                split_bytes=plan.split_bytes,
                parts_by=plan.parts_by,
            )
            for u in planned
            if u.file in read_files and u not in seen and u not in before and u not in taken
        ]
        report.ledger["units_without_rows"] = len(empty)
    # Spark's writer has no place for the spark sink's entries: written once their tasks succeeded.
    by_driver = [*(entries if cfg.sink == "spark" else []), *empty]
    try:
        ledger.write(sent.conf, cfg.ledger_topic, by_driver)
    except KafkaUnavailable as e:
        if outcome.error is None:
            raise
        report.ledger["driver_entries_not_written"] = str(e)  # the job's own failure is the one to report
    delivered = seen | {e.unit for e in by_driver}
    missing = [u for u in planned if u not in delivered and u not in before]
    report.ledger.update(
        topic=cfg.ledger_topic,
        units=len(planned),
        delivered_before=len(before),
        committed=[u.label() for u in sorted(delivered)],
        missing=[u.label() for u in missing],
    )
    if outcome.error is not None and cfg.delivery == delivery.EXACTLY_ONCE:
        if sent.after is None:  # Kafka did not answer: fencing cannot either; the next run ends them at its start
            report.delivery["fenced_after_failure"] = 0
        else:
            _end_open_transactions(cfg, report, sent)
    return [*entries, *inherited, *empty]


def _with_resume_hint(error: KappaError, report: RunReport) -> KappaError:
    """A failed job's error, saying how to finish the run once the cause is gone. A bad
    input file is fixed by replacing it, which --resume refuses (its files must not change):
    --incremental then sends what the ledger lacks, the replaced file whole."""
    missing = len(report.ledger.get("missing") or [])
    if missing and not report.dry_run:
        if isinstance(error, InputError):
            error.args = (f"{error}; once the file is fixed, --incremental sends the {missing} splits"
                          " this run did not deliver",)  # fmt: skip
        else:
            error.args = (f"{error}; once that is fixed, --resume {report.run_id} sends its {missing} missing splits",)
    return error


def _end_open_transactions(cfg: IngestConfig, report: RunReport, sent: Sent) -> None:
    """After a failed job, end every transaction of the run's scope still open on its topic
    (Spark kills the tasks it abandons without their abort), so that no consumer waits
    for them until transaction.timeout.ms. Where Kafka cannot be asked now, the next run
    of the topic ends them at its start."""
    admin_conf = kafka_python_connection(cfg.producer_settings(), sent.conf["bootstrap.servers"])
    ended = delivery.end_lingering(sent.conf, admin_conf, cfg.topic, [sent.task_delivery.scope],
                                   timeout_s=delivery.ABORT_TIMEOUT_S)  # fmt: skip
    report.delivery["fenced_after_failure"] = len(ended.fenced)
    if ended.failures or ended.error:
        report.delivery["not_fenced"] = ended.failures[:5] or [ended.error]


def _reconcile(
    cfg: IngestConfig, report: RunReport, sent: Sent, resumption: Resumption | None, entries: list[Entry]
) -> None:
    """The broker's account of the run: offsets if they balance exactly, else a read back."""
    assert sent.after is not None
    stats = sent.outcome.stats
    delta = report.add_offsets(sent.before, sent.after)
    own = sum(s.rows_sent for s in stats)
    growth = reconcile.expected_growth(own, [s.markers for s in stats if s.transactions])
    failed = len(report.duplicates.get("failed_attempts", []))
    sent_by_file: dict[str, int] = {}
    for e in entries:
        sent_by_file[e.unit.file] = sent_by_file.get(e.unit.file, 0) + e.rows_sent
    units = {u: r for s in stats for u, r in s.offset_runs().items()}
    sent_by_unit = {e.unit: e.rows_sent for e in entries if e.unit in units}
    if resumption is not None:
        # The runs before this one may have sent rows of the units this one sends: count them all.
        runs = set(resumption.lineage_runs) | {e.run_id for e in resumption.delivered.values()}
        start = {p: resumption.root_offsets_before.get(p, o) for p, o in sent.before.items()}
        found = reconcile.read_back(sent.conf, cfg.topic, start, sent.after, runs, units=units)
        rows_by_file: dict[str, int] = {}
        for e in [*resumption.delivered.values(), *entries]:
            rows_by_file[e.unit.file] = rows_by_file.get(e.unit.file, 0) + e.rows_sent
        own = reconcile.check(cfg.delivery, report.rows_sent, delta, growth, failed, found, cfg.run_id, sent_by_file,
                              sent_by_unit)  # fmt: skip
        lineage = reconcile.check_lineage(cfg.delivery, found, runs, rows_by_file)
        by_unit = [c for c in own.checks if c[0].endswith("unit by unit")]
        report.add_verdict(reconcile.Verdict([*own.checks[:1], *by_unit, *lineage.checks], lineage.verified_by,
                                             lineage.duplicates, lineage.duplicates_by_file))  # fmt: skip
    else:
        found = None
        others = _other_writers(cfg, report, sent)
        if cfg.verify == "read-back" or failed or growth is None or delta != growth or others:
            found = reconcile.read_back(sent.conf, cfg.topic, sent.before, sent.after, {cfg.run_id}, units=units)
        report.add_verdict(reconcile.check(cfg.delivery, report.rows_sent, delta, growth, failed, found, cfg.run_id,
                                           sent_by_file, sent_by_unit))  # fmt: skip
    if sent.dead_letters is not None:
        _reconcile_dead_letters(cfg, report, sent, failed)
    if report.broker_rate:
        report.broker["rate"] = broker_rate.figures(report.broker_rate)
        first, last = report.broker_rate[0]["offsets_total"], report.broker_rate[-1]["offsets_total"]
        if report.delivery["verified_by"] == "offsets":  # nobody else wrote: the same two readings
            report.check("broker-side sampler saw the offset delta", last - first == delta, delta, last - first)
        else:  # others wrote too: its first reading is later than the run's first, its last the same
            low, high = sum(sent.before.values()), sum(sent.after.values())
            report.check("broker-side sampler's readings lie within the run's offsets",
                         low <= first <= last == high, f"{low}..{high}", f"{first}..{last}")  # fmt: skip


def _other_writers(cfg: IngestConfig, report: RunReport, sent: Sent) -> str | None:
    """Why the topic's offsets cannot vouch for the run alone, if they cannot: another
    producer wrote to it meanwhile (its records could make up for lost ones). Seen by the
    partition leaders' producer state (idempotent and transactional producers; a plain one
    is not seen: --verify read-back reads the topic back in any case)."""
    admin_conf = kafka_python_connection(cfg.producer_settings(), sent.conf["bootstrap.servers"])
    after = topics.producers(admin_conf, cfg.topic, len(sent.after or {}))
    if sent.producers_before is None or after is None:
        return "the brokers did not say which producers wrote to the topic"
    wrote = topics.writers(sent.producers_before, after)
    if sent.task_delivery.transactional:
        others = wrote - delivery.producer_ids(admin_conf, sent.task_delivery.scope)
    else:  # one idempotent producer per task attempt at most (the spark sink's: per executor)
        attempts = len(report.tasks) or len(sent.outcome.stats)
        others = wrote if len(wrote) > attempts else set()
    if not others:
        return None
    report.broker["other_producers"] = len(others)
    return f"{len(others)} other producer(s) wrote to the topic during the run"


def _reconcile_dead_letters(cfg: IngestConfig, report: RunReport, sent: Sent, failed_attempts: int) -> None:
    """The dead-letter topic holds every quarantined row of the run (each task sends its
    rejects there as it quarantines them): read back, read_committed."""
    assert sent.dead_letters is not None and cfg.dead_letter_topic
    start, end = sent.dead_letters
    found = reconcile.read_back(sent.conf, cfg.dead_letter_topic, start, end, {cfg.run_id}).of({cfg.run_id})
    sent_rows = report.rows_quarantined
    report.dead_letter = {"topic": cfg.dead_letter_topic, "rows": sent_rows, "found": found}
    if cfg.delivery == delivery.EXACTLY_ONCE or not failed_attempts:
        report.check("the dead-letter topic holds each dead letter once (read_committed)", found == sent_rows,
                     sent_rows, found)  # fmt: skip
    else:  # a retried at-least-once task sends its dead letters again, as it does its rows
        report.check("the dead-letter topic holds every dead letter (read_committed)", found >= sent_rows,
                     f">= {sent_rows}", found)  # fmt: skip


def _release(release: Callable[[], None] | None, kafka: KafkaEndpoint | None) -> None:
    """Let go of Spark and Kafka before recording; a failure here is a warning, not a lost report."""
    for step in (release, kafka.close if kafka is not None else None):
        if step is None:
            continue
        try:
            step()
        except Exception as e:  # noqa: BLE001 - the run is over; its report must still be written
            print(f"kappa-ingest: warning: stopping Spark or Kafka: {_first_line(e)[:200]}", file=sys.stderr)


def _reconciliation_error(report: RunReport, path: Path) -> KappaError:
    missing = report.rows_sent - report.broker.get("offset_delta", report.rows_sent)
    if missing > 0 and report.delivery.get("verified_by") == "offsets":
        return KafkaUnavailable(
            f"Kafka holds {missing:,} fewer new records than the {report.sink} sink reported sent"
            f" ({report.broker['offset_delta']:,} of {report.rows_sent:,}): the broker refused records"
            f" without the sink noticing; see {path}"
        )
    # The read-back of the run's rows (reconcile.check); not the dead-letter topic's.
    lost = next(
        (c for c in report.checks if not c["ok"] and c["name"].startswith("a read_committed consumer finds")), None
    )
    if lost is not None:
        return KafkaUnavailable(
            f"Kafka holds {lost['actual']:,} of the {report.rows_sent:,} records the {report.sink} sink reported sent"
            f" (counted by a read_committed consumer): the broker refused records without the sink noticing; see {path}"
        )
    return KappaError(
        f"run {report.run_id} finished, but its counts do not reconcile; see the CHECK FAILED lines in {path}"
    )


def _record(cfg: IngestConfig, report: RunReport, releasing: threading.Thread | None, entries: list[Entry]) -> Path:
    """Append the run to the Delta metrics store and write summary.json.

    The per-task, stage, executor, broker-rate and ledger rows go first (while
    ``releasing`` stops Spark and Kafka); then the run's end is stamped and its totals row
    and summary.json written, so ``wall_s`` and ``phases`` include the recording. A store
    that cannot be written is a warning on stderr, not a lost run (summary.json holds everything).
    """
    details = metrics_store.run_rows(report.summary())
    del details["runs"]
    details["ledger"] = metrics_store.ledger_rows(entries)
    try:
        metrics_store.append(cfg.metrics_dir, details)
        recorded = True
    except Exception as e:  # noqa: BLE001 - the run itself is done and reported
        _store_warning(cfg, e)
        recorded = False
    if releasing is not None:
        releasing.join()
    path = report.finish(cfg.metrics_dir)
    if recorded:
        try:
            metrics_store.append(cfg.metrics_dir, {"runs": metrics_store.run_rows(report.summary())["runs"]})
        except Exception as e:  # noqa: BLE001
            _store_warning(cfg, e)
    return path


def _store_warning(cfg: IngestConfig, e: Exception) -> None:
    print(f"kappa-ingest: warning: run not recorded in {cfg.metrics_dir}/delta: {_first_line(e)[:200]}",
          file=sys.stderr)  # fmt: skip


def _settled_offsets(
    admin: Admin, topic: str, before: dict[int, int], expected: int, timeout_s: float = 10.0
) -> dict[int, int]:
    """End offsets once the broker has appended what was sent. With ``acks=0`` (or 1 and a
    lagging replica) producers finish before the log does, and commit markers follow a
    commit; wait, bounded, until the offsets reach ``expected`` or stop moving for a second."""
    base = sum(before.values())
    after = admin.end_offsets(topic)
    deadline = time.monotonic() + timeout_s
    still_since = time.monotonic()
    while sum(after.values()) - base < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        now = admin.end_offsets(topic)
        if sum(now.values()) != sum(after.values()):
            still_since = time.monotonic()
        elif time.monotonic() - still_since > 1.0:
            break
        after = now
    return after


def _offsets_if_reachable(admin: Admin, topic: str) -> dict[int, int] | None:
    """The end offsets after a failed job, if Kafka answers quickly (it may be what failed)."""
    admin.timeout_s = FAILED_RUN_OFFSETS_TIMEOUT_S
    try:
        return admin.end_offsets(topic, FAILED_RUN_OFFSETS_TIMEOUT_S)
    except KafkaUnavailable:
        return None


def _rate_per_task(cfg: IngestConfig, spark: SparkSession, source: csv_source.Source) -> float | None:
    """The job-wide --target-rate split over the tasks that run at once."""
    if cfg.target_rate is None:
        return None
    concurrent = max(1, min(source.tasks, spark.sparkContext.defaultParallelism))
    return cfg.target_rate / concurrent


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
