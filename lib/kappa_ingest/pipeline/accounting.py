"""Accounting: which units the run delivered (its tasks', an earlier attempt's, another
run's), which are missing, the ledger entries the driver writes itself, and after a
failed job the transactions it left open ended."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pyspark import SparkContext

from kappa_ingest.config import IngestConfig
from kappa_ingest.config.choices import EXACTLY_ONCE
from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery import ledger
from kappa_ingest.delivery.incremental import Selection
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.delivery.resume import Resumption
from kappa_ingest.errors import (
    InputError,
    KafkaUnavailable,
    KappaError,
    LockLost,
)
from kappa_ingest.kafka.settings import kafka_python_connection
from kappa_ingest.kafka.topics import Admin, offsets_if_reachable
from kappa_ingest.pipeline.sending import Sent
from kappa_ingest.report.run import RunReport
from kappa_ingest.sinks.task_stats import TaskStats
from kappa_ingest.source.splits import Plan, Unit
from kappa_ingest.spark.job_groups import await_tasks_ended


def inherited(run_id: str, stats: list[TaskStats]) -> tuple[list[Entry], list[Entry]]:
    """Units tasks found committed when they came to send them, once each: by attempts of
    this run Spark counted as failed (their rows are this run's), and by other runs."""
    out: dict[Unit, Entry] = {}
    for s in stats:
        for e in s.inherited_entries():
            out.setdefault(e.unit, e)
    own = [e for e in out.values() if e.run_id == run_id]
    return own, [e for e in out.values() if e.run_id != run_id]


def committed_by_failed_tasks(cfg: IngestConfig, sent: Sent, stats: list[TaskStats], known: list[Entry]) -> list[Entry]:
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


@dataclass(frozen=True)
class Accounted:
    """The ledger's account of one run: what it planned, delivered and left missing."""

    topic: str  # the ledger's
    entries: list[Entry]  # this run's, for the ledger's Delta copy
    units: int  # planned
    delivered_before: int  # by the runs a resumed or incremental one continues
    committed: list[Unit]
    missing: list[Unit]
    unplanned: int  # splits Spark read that the run did not plan (none, or the plan is wrong)
    without_rows: int | None  # planned units no row begins in (after a successful job), entered by the driver
    not_written: str | None  # why the driver's entries were not written (after a failed job)
    failure: KafkaUnavailable | None = None  # they were not written after a successful job: the run fails
    unread: list[str] = field(default_factory=list)  # planned files no task read a line of (after a successful job)


@dataclass(frozen=True)
class Elsewhere:
    """Units tasks found committed by another run of the scope: not sent by this one."""

    units: int
    rows: int
    runs: list[str]

    @staticmethod
    def of(entries: list[Entry]) -> Elsewhere | None:
        if not entries:
            return None
        return Elsewhere(len(entries), sum(e.rows_sent for e in entries), sorted({e.run_id for e in entries}))


# Long: the ledger's account of one run, unit sets built and compared in one place.
def account(
    cfg: IngestConfig,
    plan: Plan,
    sent: Sent,
    inherited: list[Entry],
    elsewhere: list[Entry],
    earlier: Resumption | Selection | None,
) -> Accounted:
    """Which units this run delivered and which are missing; the ledger entries the driver
    writes itself (the Spark sink's; after a successful job, units no row begins in)."""
    outcome = sent.outcome
    entries = [e for s in outcome.stats for e in s.entries()]
    seen = {e.unit for e in entries} | {e.unit for e in inherited} | {e.unit for e in elsewhere}
    taken = {u for s in outcome.stats for u in s.taken_units()}  # rows in them, another writer's to commit
    before = earlier.delivered if earlier else {}
    planned = plan.units()
    unplanned = seen - set(planned)
    read_files = {f.path for f in plan.files} if earlier is None else set(earlier.paths)
    empty: list[Entry] = []
    unread: set[Unit] = set()
    if outcome.error is None:
        files = {f.path: f for f in plan.files}
        # A line begins where a file does: a file's first split that no task saw was not read
        # (a reader that left the file out), never one to enter as holding no rows.
        unread = {u for u in planned if u.start == 0 and u.parts == 1 and files[u.file].size and u.file in read_files
                  and u not in seen and u not in before and u not in taken}  # fmt: skip
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
                file_version=files[u.file].version,
            )
            for u in planned
            if u.file in read_files and u not in seen and u not in before and u not in taken and u not in unread
        ]
    # Spark's writer has no place for the spark sink's entries: written once their tasks succeeded.
    by_driver = [*(entries if cfg.sink == "spark" else []), *empty]
    not_written, failure = None, None
    try:
        ledger.write(sent.conf, cfg.ledger_topic, by_driver)
    except KafkaUnavailable as e:
        if outcome.error is None:
            failure = e
        else:
            not_written = str(e)  # the job's own failure is the one to report
    delivered = seen | {e.unit for e in by_driver}
    missing = [u for u in planned if u not in delivered and u not in before]
    return Accounted(cfg.ledger_topic, [*entries, *inherited, *empty], len(planned), len(before), sorted(delivered), missing,
                     len(unplanned), len(empty) if outcome.error is None else None, not_written, failure,
                     sorted({u.file for u in unread}))  # fmt: skip


LOCK_LOST_REST = (
    "what it committed is in the topic once, and the other run (or the next --incremental run) sends the rest"
)


def with_resume_hint(error: KappaError, report: RunReport) -> KappaError:
    """A failed job's error, saying how to finish the run once the cause is gone. A bad
    input file is fixed by replacing it, which --resume refuses (its files must not change):
    --incremental then sends what the ledger lacks, the replaced file whole."""
    missing = len(report.ledger.get("missing") or [])
    if isinstance(error, LockLost):  # the run that took it over sends the rest: resuming this one has nothing to do
        error.args = (f"{error}; {LOCK_LOST_REST}",)
    elif missing and not report.dry_run:
        if isinstance(error, InputError):
            error.args = (f"{error}; once the file is fixed, --incremental sends the {missing} splits"
                          " this run did not deliver",)  # fmt: skip
        else:
            error.args = (f"{error}; once that is fixed, --resume {report.run_id} sends its {missing} missing splits",)
    return error


@dataclass(frozen=True)
class FailureEnded:
    """How a failed job's last tasks and open transactions were ended."""

    tasks_end_wait_s: float  # until its last tasks were gone
    tasks_still_running: bool  # some were not, within the wait
    fenced: int | None = None  # transactions ended (exactly-once; 0: Kafka did not answer)
    not_fenced: list | None = None  # what could not be, and why


def after_failed_job(cfg: IngestConfig, sent: Sent, sc: SparkContext, group: str) -> FailureEnded:
    """Before the ledger is read for what the failed job committed: its last tasks gone (a
    killed task's Python worker sends on until it is killed; the report says how long that
    took), then their transactions ended (one whose commit was under way completes), then
    the topic's end offsets read again, those commits included."""
    waiting = time.monotonic()
    still_running = not await_tasks_ended(sc, group)
    waited = round(time.monotonic() - waiting, 3)
    fenced, not_fenced = end_open_transactions(cfg, sent)
    if sent.after is not None:
        with Admin(sent.conf["bootstrap.servers"], cfg.producer_settings()) as admin:
            sent.after = offsets_if_reachable(admin, cfg.topic) or sent.after
    return FailureEnded(waited, still_running, fenced, not_fenced)


def end_open_transactions(cfg: IngestConfig, sent: Sent) -> tuple[int | None, list | None]:
    """After a failed job, end every transaction of the run's scope still open on its topic
    (Spark kills the tasks it abandons without their abort), so that no consumer waits
    for them until transaction.timeout.ms: an open one is aborted, one whose commit was
    under way is completed. Where Kafka cannot be asked now, the next run of the topic
    ends them at its start. Returns how many were ended (None: not exactly-once) and
    what could not be."""
    if cfg.delivery != EXACTLY_ONCE:
        return None, None
    if sent.after is None:  # Kafka did not answer: fencing cannot either
        return 0, None
    admin_conf = kafka_python_connection(cfg.producer_settings(), sent.conf["bootstrap.servers"])
    ended = delivery.end_lingering(sent.conf, admin_conf, cfg.topic, [sent.task_delivery.scope],
                                   timeout_s=delivery.ABORT_TIMEOUT_S)  # fmt: skip
    return len(ended.fenced), (ended.failures[:5] or [ended.error]) if ended.failures or ended.error else None
