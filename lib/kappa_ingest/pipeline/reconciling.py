"""Reconciling: the broker's account of the run, from its offsets where they balance
exactly and nobody else wrote, else a read_committed read-back; the dead-letter topic's
likewise; and the broker-side sampler's readings checked against the run's offsets."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kappa_ingest import failpoints
from kappa_ingest.config import IngestConfig
from kappa_ingest.config.choices import EXACTLY_ONCE
from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery import reconcile
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.delivery.resume import Resumption
from kappa_ingest.kafka import topics
from kappa_ingest.kafka.settings import kafka_python_connection
from kappa_ingest.pipeline.sending import Sent
from kappa_ingest.report import broker_rate
from kappa_ingest.report.run import RunReport


def reconcile_run(
    cfg: IngestConfig, report: RunReport, sent: Sent, resumption: Resumption | None, entries: list[Entry]
) -> None:
    """The broker's account of the run: offsets if they balance exactly, else a read back."""
    assert sent.after is not None
    failpoints.hold(failpoints.BEFORE_RECONCILE, cfg.run_id)
    stats = sent.outcome.stats
    delta = report.add_offsets(sent.before, sent.after)
    own = sum(s.rows_sent for s in stats)
    growth = reconcile.expected_growth(own, [s.markers for s in stats if s.transactions])
    failed = len(report.duplicates.get("failed_attempts", []))
    sent_by_file: dict[str, int] = {}
    for e in entries:
        sent_by_file[e.unit.file] = sent_by_file.get(e.unit.file, 0) + e.rows_sent
    located = {units: runs for s in stats for units, runs in s.offset_runs().items()}
    rows_of = {e.unit: e.rows_sent for e in entries}
    sent_by_transaction = {g: sum(rows_of[u] for u in g) for g in located if all(u in rows_of for u in g)}
    if resumption is not None:
        # The runs before this one may have sent rows of the units this one sends: count them all.
        runs = set(resumption.lineage_runs) | {e.run_id for e in resumption.delivered.values()}
        start = {p: resumption.root_offsets_before.get(p, o) for p, o in sent.before.items()}
        found = reconcile.read_back(sent.conf, cfg.topic, start, sent.after, runs, located=located)
        rows_by_file: dict[str, int] = {}
        for e in [*resumption.delivered.values(), *entries]:
            rows_by_file[e.unit.file] = rows_by_file.get(e.unit.file, 0) + e.rows_sent
        own = reconcile.check(cfg.delivery, report.rows_sent, delta, growth, failed, found, cfg.run_id, sent_by_file,
                              sent_by_transaction)  # fmt: skip
        lineage = reconcile.check_lineage(cfg.delivery, found, runs, rows_by_file)
        by_unit = [c for c in own.checks if c[0] == reconcile.UNIT_BY_UNIT]
        report.add_verdict(reconcile.Verdict([*own.checks[:1], *by_unit, *lineage.checks], lineage.verified_by,
                                             lineage.duplicates, lineage.duplicates_by_file))  # fmt: skip
    else:
        found = None
        others = other_writers(cfg, report, sent)
        if cfg.verify == "read-back" or failed or growth is None or delta != growth or others:
            found = reconcile.read_back(sent.conf, cfg.topic, sent.before, sent.after, {cfg.run_id},
                                        located=located)  # fmt: skip
        report.add_verdict(reconcile.check(cfg.delivery, report.rows_sent, delta, growth, failed, found, cfg.run_id,
                                           sent_by_file, sent_by_transaction))  # fmt: skip
    if sent.dead_letters is not None:
        reconcile_dead_letters(cfg, report, sent, failed)
    if report.broker_rate:  # its first and last readings are the run's own offsets before and after
        report.broker["rate"] = broker_rate.figures(report.broker_rate)
    if sent.sampled:  # what its own client read in between
        low, high = sum(sent.before.values()), sum(sent.after.values())
        report.check("broker-side sampler's readings lie within the run's offsets",
                     low <= min(sent.sampled) and max(sent.sampled) <= high, f"{low}..{high}",
                     f"{min(sent.sampled)}..{max(sent.sampled)}")  # fmt: skip


UNSEEN_WRITERS = "the brokers did not say which producers wrote to the topic"


def other_writers(cfg: IngestConfig, report: RunReport, sent: Sent) -> str | None:
    """Why the topic's offsets cannot vouch for the run alone, if they cannot: another
    producer wrote to it meanwhile (its records could make up for lost ones). Seen by the
    partition leaders' producer state (idempotent and transactional producers; a plain one
    is not seen: --verify read-back reads the topic back in any case)."""
    if sent.producers_before is None:
        return UNSEEN_WRITERS
    admin_conf = kafka_python_connection(cfg.producer_settings(), sent.conf["bootstrap.servers"])
    kept, partitions, scope = sent.kept, len(sent.after or {}), sent.task_delivery.scope
    assert kept is not None, "a run that sent keeps its Kafka clients"

    def ours() -> set[int]:
        return kept.ask("transactions", admin_conf, delivery.ABORT_TIMEOUT_S,
                        lambda c: delivery.producer_ids(admin_conf, scope, client=c))  # fmt: skip

    # Both asked at once, each through a client of its own (kept: connected once for a watch's batches).
    with ThreadPoolExecutor(2, thread_name_prefix="writers") as pool:
        asked = pool.submit(kept.producers, admin_conf, cfg.topic, partitions)
        ours_asked = pool.submit(ours) if sent.task_delivery.transactional else None
        after = asked.result()
        if after is None:
            return UNSEEN_WRITERS
        kept.keep_producers(cfg.topic, partitions, after)  # the next run's "before" (a writer in between: another)
        wrote = topics.writers(sent.producers_before, after)
    if ours_asked is not None:
        others = wrote - ours_asked.result()
    else:  # one idempotent producer per task attempt at most (the spark sink's: per executor)
        attempts = len(report.tasks) or len(sent.outcome.stats)
        others = wrote if len(wrote) > attempts else set()
    if not others:
        return None
    report.broker["other_producers"] = len(others)
    return f"{len(others)} other producer(s) wrote to the topic during the run"


def reconcile_dead_letters(cfg: IngestConfig, report: RunReport, sent: Sent, failed_attempts: int) -> None:
    """The dead-letter topic holds every quarantined row of the run (each task sends its
    rejects there as it quarantines them): read back, read_committed."""
    assert sent.dead_letters is not None and cfg.dead_letter_topic
    start, end = sent.dead_letters
    found = reconcile.read_back(sent.conf, cfg.dead_letter_topic, start, end, {cfg.run_id}).of({cfg.run_id})
    sent_rows = report.rows_quarantined
    report.dead_letter = {"topic": cfg.dead_letter_topic, "rows": sent_rows, "found": found}
    if cfg.delivery == EXACTLY_ONCE or not failed_attempts:
        report.check("the dead-letter topic holds each dead letter once (read_committed)", found == sent_rows,
                     sent_rows, found)  # fmt: skip
    else:  # a retried at-least-once task sends its dead letters again, as it does its rows
        report.check("the dead-letter topic holds every dead letter (read_committed)", found >= sent_rows,
                     f">= {sent_rows}", found)  # fmt: skip
