"""The run report built from the steps' typed results: each step returns what it found
(:class:`.sending.Ready`, :class:`.sending.Sent`, :class:`.accounting.Accounted`,
:class:`.reconciling.Reconciled`, ...) and writes nothing into the report itself; these
write them into it, in the sections contract §3 names. (The report's own joins of
Spark's records with the tasks' counts are ``RunReport.add_run`` and its peers.)"""

from __future__ import annotations

from dataclasses import asdict

from kappa_ingest.config import IngestConfig
from kappa_ingest.kafka.endpoint import KafkaEndpoint
from kappa_ingest.pipeline.accounting import Accounted, Elsewhere, FailureEnded
from kappa_ingest.pipeline.reconciling import Counted, Reconciled
from kappa_ingest.pipeline.sending import Ready, Sent
from kappa_ingest.quality import Gated
from kappa_ingest.report import broker_rate
from kappa_ingest.report.run import RunReport
from kappa_ingest.reprocess import Compared


def add_kafka(report: RunReport, kafka: KafkaEndpoint) -> None:
    """The Kafka the run sends to."""
    report.bootstrap_servers = kafka.servers()
    report.broker["embedded"] = kafka.embedded


def add_ready(cfg: IngestConfig, report: RunReport, ready: Ready) -> None:
    """The topics as set up, the offsets before, the tasks' transactions: the run's plan."""
    t = ready.topics
    if t.created:
        report.broker["topic_created"] = True
    report.broker.update(topic_partitions=t.partitions, topic_replication=t.replication)
    if t.note:
        report.broker["topic_note"] = t.note
    report.broker.update(max_record_bytes=t.max_record_bytes, batch_bytes=t.batch_bytes)
    td = ready.task_delivery
    report.delivery.update(tasks=ready.source.tasks, ledger_topic=cfg.ledger_topic)
    if td.transactional:
        per = "p:<parts>:<part>" if td.shuffled else "u:<unit digest>"
        report.delivery.update(transactional_ids=f"{td.scope}{per}",
                               transaction_timeout_ms=int(td.transaction_timeout_s * 1000))  # fmt: skip
    report.add_offsets(ready.before, ready.before)


def add_sent(report: RunReport, sent: Sent) -> None:
    """The topic's rate curve over the send (a failed job's too)."""
    report.broker_rate = sent.broker_rate


def add_offsets(report: RunReport, sent: Sent) -> None:
    """The topic's end offsets after the send, if Kafka said."""
    if sent.after is not None:
        report.add_offsets(sent.before, sent.after)


def add_failure_ended(report: RunReport, ended: FailureEnded) -> None:
    """How a failed job's tasks and transactions were ended."""
    if ended.tasks_still_running:
        report.delivery["tasks_still_running_after_failure"] = True
    report.delivery["tasks_end_wait_s"] = ended.tasks_end_wait_s
    if ended.fenced is not None:
        report.delivery["fenced_after_failure"] = ended.fenced
    if ended.not_fenced:
        report.delivery["not_fenced"] = ended.not_fenced


def add_elsewhere(report: RunReport, elsewhere: Elsewhere | None) -> None:
    """Units found committed by another run of the scope while this one ran: not sent by it."""
    if elsewhere is not None:
        report.delivery["delivered_by_other_runs"] = asdict(elsewhere)


def add_accounted(report: RunReport, a: Accounted) -> None:
    """The ledger's account of the run."""
    report.check("every split Spark read is one the run planned", not a.unplanned, 0, a.unplanned)
    if a.without_rows is not None:  # the job succeeded: every file planned was read
        report.check("every file the run planned was read by a task", not a.unread, 0, a.unread[:5])
        report.ledger["units_without_rows"] = a.without_rows
    if a.not_written is not None:
        report.ledger["driver_entries_not_written"] = a.not_written
    report.ledger.update(
        topic=a.topic,
        units=a.units,
        delivered_before=a.delivered_before,
        committed=[u.label() for u in a.committed],
        missing=[u.label() for u in a.missing],
    )


def counted(report: RunReport) -> Counted:
    """What the report counted of the run's tasks, for the reconciliation to check."""
    failed = len(report.duplicates.get("failed_attempts", []))
    return Counted(report.rows_sent, report.rows_quarantined, failed, len(report.tasks))


def add_reconciled(report: RunReport, r: Reconciled) -> None:
    """The broker's account of the run: the verdict and its checks."""
    report.add_verdict(r.verdict)
    if r.dead_letters is not None:
        report.dead_letter = asdict(r.dead_letters)
    if r.other_producers:
        report.broker["other_producers"] = r.other_producers
    if report.broker_rate:  # its first and last readings are the run's own offsets before and after
        report.broker["rate"] = broker_rate.figures(report.broker_rate)
    for name, ok, expected, actual in r.checks:
        report.check(name, ok, expected, actual)


def add_quality(report: RunReport, gated: Gated) -> None:
    """The --expectations suite's verdict."""
    report.quality = gated.outcome.to_json()


def add_quarantine(report: RunReport, where: str, reasons: dict[str, int]) -> None:
    """The quarantined rows written beside the report, by reason."""
    report.quarantine = {"rows": sum(reasons.values()), "path": where, "reasons": reasons}
    report.check("quarantine holds every quarantined row", report.quarantine["rows"] == report.rows_quarantined,
                 report.rows_quarantined, report.quarantine["rows"])  # fmt: skip


def add_replay(report: RunReport, c: Compared) -> None:
    """Both topics of a replay compared."""
    assert report.reprocess is not None
    report.reprocess["compare"] = c.sides
    if c.retention_warning:
        report.reprocess["retention_warning"] = c.retention_warning
    report.check("the new topic holds rows_sent records of this run (read_committed)",
                 c.new_records == report.rows_sent, report.rows_sent, c.new_records)  # fmt: skip
