"""The ingest job: CSV files → JSON records → a Kafka topic, measured and reconciled.

    resources  = RunResources(cfg, spark)             # Kafka, the topic's lock, Spark: one owner
    held       = resources.hold()                     # one run at a time per topic
    work       = prepare(cfg, ...)                    # --resume / --incremental: what the ledger lacks
    source     = _read(...)                           # the planned units; lines to parse
    source     = _gate(...)                           # --expectations, before anything is sent
    sent       = _send(...)                           # topics set up, the plan written; convert + produce
    entries    = _account(...)                        # Spark's records; units delivered, missing
    _settle(...)                                      # the topic holds what was sent, or why not
    _quarantine(...)                                  # the rejected rows, with their reasons
    _finish(...)                                      # summary.json, the Delta tables, printed

``ingest`` is one run in a session the caller has; ``run`` the same with resources someone
else holds: the command line's one run, or each batch of a watch (``kappa_ingest.watch``).
Each step returns a typed result (``pipeline.sending.Ready``, ``.Sent``,
``pipeline.accounting.Accounted``, ``pipeline.reconciling.Reconciled``, ...), with the
failure that ends the run if one does, and writes nothing into the run's report:
``pipeline.reported`` does, then the failure is raised.
Whatever happens, ``summary.json`` is written with the run's status (first before sending,
with the run's plan, so that a killed run can be resumed), and the run's clock
(``phases``) says where the time went from the command's start.
"""

from __future__ import annotations

import sys
import threading

from confluent_kafka import KafkaException
from pyspark.sql import SparkSession

from kappa_ingest import quality, reprocess
from kappa_ingest.config import IngestConfig
from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery.incremental import Selection
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.delivery.lock import Lock
from kappa_ingest.delivery.resume import Resumption
from kappa_ingest.delivery.task_delivery import for_tasks
from kappa_ingest.delivery.work import Work, prepare
from kappa_ingest.errors import (
    KafkaUnavailable,
    KappaError,
    LockLost,
    first_line,
)
from kappa_ingest.pipeline import accounting, reconciling, reported, sending
from kappa_ingest.pipeline.resources import RunResources
from kappa_ingest.pipeline.sending import Sent
from kappa_ingest.report import recording
from kappa_ingest.report.phases import RunClock
from kappa_ingest.report.run import RunReport, render
from kappa_ingest.reprocess import Replay
from kappa_ingest.sinks.partition_runner import SendOutcome, run_partitions
from kappa_ingest.sinks.producer import Discard
from kappa_ingest.source import dataframe as csv_source
from kappa_ingest.source import opening, quarantine, record_size
from kappa_ingest.source.splits import changed_input
from kappa_ingest.spark import metrics as spark_metrics
from kappa_ingest.spark import warmup
from kappa_ingest.spark.arrow_batches import unsized_batches
from kappa_ingest.spark.failures import classify, spark_action
from kappa_ingest.spark.job_groups import job_group


def ingest(
    cfg: IngestConfig,
    spark: SparkSession,
    echo: bool = True,
    *,
    clock: RunClock | None = None,
    replay: Replay | None = None,
) -> RunReport:
    """One run in the caller's session (a notebook's, the tests', the bench's): its Kafka
    and the topic's lock taken here and let go at its end. See :func:`run`."""
    with RunResources(cfg, spark) as resources:
        return run(cfg, resources, clock or RunClock(), echo=echo, replay=replay)


def run(
    cfg: IngestConfig,
    resources: RunResources,
    clock: RunClock,
    work: Work | None = None,
    *,
    echo: bool = True,
    replay: Replay | None = None,
    release_early: bool = False,
) -> RunReport:
    """Run the pipeline once with ``resources`` (its Spark started); returns the run's report
    (also recorded, written to summary.json and printed if ``echo``).

    ``clock`` has the command's start; ``work`` what the run sends (:func:`delivery.work.prepare`;
    chosen here, with the lock taken, if not given); ``replay`` what a ``reprocess`` run
    replays. ``release_early``: let go of the resources once the run needs them no more,
    before recording (the command line: nobody waits for Spark to stop after the report; a
    watch keeps them for its next batch). Raises a KappaError subclass (carrying the
    contract's exit code) on failure, after the report has been written with ``status: failed``.
    """
    clock.end("startup")
    opening.for_run(cfg.s3_endpoint)
    if work is None:
        try:
            resources.hold()
            work = prepare(cfg, resources.servers)
        except BaseException as e:
            recording.failed_report(cfg, clock, e)
            raise
    if work.nothing_left:
        servers = resources.servers() if cfg.incremental else cfg.bootstrap_servers or ""
        if release_early:
            resources.close()
        return recording.nothing_left(cfg, work, servers, clock, echo, resources.held)
    return _pipeline(cfg, resources, clock, work, echo, replay, release_early)


# Long: the pipeline itself; each step is a named call, and the try/finally must span them all.
def _pipeline(
    cfg: IngestConfig,
    resources: RunResources,
    clock: RunClock,
    work: Work,
    echo: bool,
    replay: Replay | None,
    release_early: bool,
) -> RunReport:
    spark = resources.spark
    assert spark is not None, "a run's Spark starts before it runs"
    held = resources.held
    report = recording.new_report(cfg, clock, held)
    report.spark_master = spark.sparkContext.master
    if replay is not None:
        report.reprocess = replay.to_json()
    new_entries: list[Entry] = []
    unreconciled: KappaError | None = None
    try:
        delivery.check_spark(cfg.delivery, spark.sparkContext.getConf().get("spark.speculation", "false"))
        # The Python workers start (their imports: ~1.5 s of two cores) while the input is
        # planned (a cold session's first plans: ~1 s) and Kafka set up.
        warming = warmup.start(spark, cfg.sink, needed=not resources.workers_warm)
        earlier = work.earlier  # what was delivered before, and the files to read
        source, group = _read(cfg, spark, report, earlier, held)
        skip = work.skip
        with unsized_batches(spark, source.narrow):  # every job that hands the source's rows to Python
            if cfg.expectations:
                source = _gate(cfg, source, skip, report, echo)
            source, sent, outcome = _send(cfg, spark, source, resources, report, skip, earlier, warming, echo)
            new_entries = _account(cfg, spark, report, source, sent, outcome, group, earlier)
            _settle(cfg, report, source, sent, outcome, held, work.resumption, replay, new_entries)
            _quarantine(cfg, report, source, skip)
        report.check_counts()
        report.status = "succeeded" if report.consistent else "failed"
        if not report.consistent:
            unreconciled = recording.reconciliation_error(report, report.path(cfg.metrics))
            report.error = str(unreconciled)
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
    except KappaError as e:
        report.status, report.error = e.status, str(e)
        raise
    except KafkaException as e:  # a driver-side Kafka call not wrapped where it was made
        unavailable = KafkaUnavailable(f"Kafka did not answer the driver: {e.args[0].str()}; check the brokers")
        report.status, report.error = unavailable.status, str(unavailable)
        raise unavailable from e
    except Exception as e:
        report.status, report.error = "failed", f"{type(e).__name__}: {first_line(e)}"
        raise
    finally:
        _finish(cfg, report, resources, release_early, new_entries, echo)
    if unreconciled is not None:
        raise unreconciled
    return report


def _read(
    cfg: IngestConfig, spark: SparkSession, report: RunReport, earlier: Resumption | Selection | None, held: Lock | None
) -> tuple[csv_source.Source, str]:
    """The run's source (of a resumed or incremental run: the files the ledger lacks), its
    plan in the report, and the job group its sending runs in."""
    if isinstance(earlier, Resumption):
        recording.add_resumption(report, earlier)
    elif earlier is not None:
        recording.add_selection(report, earlier)
    source = csv_source.read(spark, cfg, earlier.plan, earlier.paths) if earlier else csv_source.read(spark, cfg)
    report.read_path = source.mode
    report.plan = source.plan.to_json()
    sc = spark.sparkContext
    group = job_group(cfg)
    if held is not None:  # another run took the topic over: stop sending at once (exit 6 below)
        held.on_lost(lambda _reason: sc.cancelJobGroup(group))
    return source, group


def _gate(
    cfg: IngestConfig, source: csv_source.Source, skip: frozenset, report: RunReport, echo: bool
) -> csv_source.Source:
    """The --expectations suite on every row before anything is sent: its verdict in the
    report; a failure that gates stops the run (exit 5)."""
    gated = quality.gate(cfg, source, skip, cfg.metrics.sub("runs", cfg.run_id), echo)
    reported.add_quality(report, gated)
    if gated.failure is not None:
        raise gated.failure
    return gated.source


def _send(
    cfg: IngestConfig,
    spark: SparkSession,
    source: csv_source.Source,
    resources: RunResources,
    report: RunReport,
    skip: frozenset,
    earlier: Resumption | Selection | None,
    warming: threading.Thread,
    echo: bool,
) -> tuple[csv_source.Source, Sent | None, SendOutcome]:
    """Send (a dry run: convert, and discard) once the Python workers are ``warming``."""
    kafka = resources.open_kafka()
    rate = sending.rate_per_task(cfg, spark, source)
    if cfg.dry_run:
        warming.join()
        report.clock.end("setup")
        task_delivery = for_tasks(cfg, source, None, {}, skip)
        # The producer's limit only: a dry run asks Kafka nothing.
        source = sending.size_checked(cfg, source, record_size.limit(cfg.sink, cfg.producer_settings(), None))
        outcome = run_partitions(source, lambda _: Discard(), task_delivery, rate)
        report.clock.end("sending")
        return source, None, outcome
    ledger_end = earlier.ledger_end if earlier else None
    reported.add_kafka(report, kafka)  # a failed set-up's report says which Kafka it asked
    checked = resources.held.ledger_checked if resources.held is not None else None
    ready = sending.set_up(cfg, source, kafka, resources.kept(), skip, rate, ledger_end, checked)
    reported.add_ready(cfg, report, ready)
    report.write(cfg.metrics)  # the run's plan, before anything is sent: --resume starts from it
    sent = sending.send(cfg, ready, warming, rate, report.clock, echo)
    reported.add_sent(report, sent)
    if sent.failure is not None:
        raise sent.failure
    return ready.source, sent, sent.outcome  # its parser also takes out records too large for Kafka


def _account(
    cfg: IngestConfig,
    spark: SparkSession,
    report: RunReport,
    source: csv_source.Source,
    sent: Sent | None,
    outcome: SendOutcome,
    group: str,
    earlier: Resumption | Selection | None,
) -> list[Entry]:
    """The tasks' counts and Spark's own records into the report; which units the run
    delivered. Returns the run's ledger entries (for the ledger's Delta copy)."""
    inherited, elsewhere = accounting.inherited(cfg.run_id, outcome.stats)
    if sent is not None and outcome.error is not None:
        ended = accounting.after_failed_job(cfg, sent, spark.sparkContext, group)  # before the ledger is read
        reported.add_failure_ended(report, ended)
        inherited += accounting.committed_by_failed_tasks(cfg, sent, outcome.stats, inherited)
    per_task = sent is not None and sent.task_delivery.shuffled
    report.add_run(outcome.stats, spark_metrics.collect(spark, group), inherited, per_task)
    report.add_headers(source.headers, outcome.stats, inherited)
    reported.add_elsewhere(report, accounting.Elsewhere.of(elsewhere))
    if report.quality and report.quality["gate"] == "quarantine":
        report.add_quality_counts(outcome.stats)
    if sent is None:
        return []
    accounted = accounting.account(cfg, source.plan, sent, inherited, elsewhere, earlier)
    reported.add_accounted(report, accounted)
    if accounted.failure is not None:
        raise accounted.failure
    return accounted.entries


def _settle(
    cfg: IngestConfig,
    report: RunReport,
    source: csv_source.Source,
    sent: Sent | None,
    outcome: SendOutcome,
    held: Lock | None,
    resumption: Resumption | None,
    replay: Replay | None,
    entries: list[Entry],
) -> None:
    """How the run ended: the failure to raise (a lost lock, the job's error, an input that
    changed while read, units another run took over), else the topic reconciled with what
    was sent (and, for a replay, both topics compared)."""
    changed = changed_input(source.plan, cfg.run_id)  # a file that changed while read: not all of it was sent
    if held is not None and held.lost is not None:
        raise LockLost(f"{held.lost}; {accounting.LOCK_LOST_REST}")
    if sent is not None:  # how far the topic moved, whatever follows
        reported.add_offsets(report, sent)
    if outcome.error is not None:
        if changed is not None:
            raise changed from outcome.error
        raise accounting.with_resume_hint(classify(outcome.error), report) from outcome.error
    if sent is not None:
        reconciled = reconciling.reconcile_run(cfg, sent, resumption, entries, reported.counted(report))
        reported.add_reconciled(report, reconciled)
        if reconciled.failure is not None:
            raise reconciled.failure
        if replay is not None:
            reported.add_replay(report, reprocess.check_replay(cfg, replay, sent.conf))
        else:
            _warn_of_retention(report, cfg, sent)
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


_warned_of: set[str] = set()  # topics this process printed a retention warning of (once: a watch's batches)


def _warn_of_retention(report: RunReport, cfg: IngestConfig, sent: Sent) -> None:
    """A run that succeeds and whose records the broker then deletes must say so (a check
    that fails says that instead: the run's outcome is not the warning's)."""
    try:
        warning = reconciling.retention_warning(cfg, sent)
    except Exception as e:  # noqa: BLE001
        print(f"kappa-ingest: warning: the topic's retention not checked: {first_line(e)[:200]}", file=sys.stderr)
        return
    if warning is None:
        return
    report.broker["retention_warning"] = warning
    if cfg.topic not in _warned_of:
        _warned_of.add(cfg.topic)
        print(f"kappa-ingest: warning: {warning}", file=sys.stderr)


def _quarantine(cfg: IngestConfig, report: RunReport, source: csv_source.Source, skip: frozenset) -> None:
    """The quarantined rows, with their reasons, beside the report."""
    if not report.rows_quarantined:
        return
    where = cfg.metrics.sub("runs", cfg.run_id, "quarantine")
    reasons = spark_action(lambda: quarantine.write(source, where, skip))
    reported.add_quarantine(report, where.root, reasons)


def _finish(
    cfg: IngestConfig, report: RunReport, resources: RunResources, release_early: bool, entries: list[Entry], echo: bool
) -> None:
    """Whatever happened: the run recorded and its report printed; with ``release_early``
    the lock let go beside Spark's stop, then Kafka, while the run is recorded."""
    report.clock.end("reconcile")  # a failed run's last phase takes its time up to here
    if report.status != "succeeded":
        try:
            resources.forget()  # what Kafka answered it is not trusted by the next run (a watch's next batch)
        except Exception as e:  # noqa: BLE001 - the report is written all the same
            print(f"kappa-ingest: warning: closing the driver's Kafka clients: {first_line(e)[:200]}", file=sys.stderr)
    if release_early and resources.held is not None:
        resources.held.stop_renewing()  # its summary is final: no renewal, nor loss, after it
    if resources.held is not None:
        report.delivery["lock"] = resources.held.summary()
    if resources.recorder is not None:  # a watch's batch: its next one starts while its rows are written
        if release_early:
            resources.release_lock()
        recording.record_later(resources.recorder, cfg, report, entries)
        return
    releasing = None
    if release_early:
        releasing = threading.Thread(target=_release, args=(resources,), name="release")
        releasing.start()  # the lock let go beside Spark's stop, then Kafka, while the store is written
    path = recording.record(cfg, report, releasing, entries)
    if echo:
        print(render(report.summary()))
        print(f"report: {path}")


def _release(resources: RunResources) -> None:
    """Let go of the topic's lock, Kafka and Spark (the lock beside Spark's stop) while the
    run is recorded; a failure here is a warning, not a lost report."""
    try:
        resources.close()
    except Exception as e:  # noqa: BLE001 - the run is over; its report must still be written
        print(f"kappa-ingest: warning: stopping Spark or Kafka: {first_line(e)[:200]}", file=sys.stderr)
