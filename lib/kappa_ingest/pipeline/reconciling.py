"""Reconciling: the broker's account of the run, from its offsets where they balance
exactly and nobody else wrote, else a read_committed read-back; the dead-letter topic's
likewise; and the broker-side sampler's readings checked against the run's offsets."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kappa_ingest import failpoints
from kappa_ingest.config import IngestConfig
from kappa_ingest.config.choices import EXACTLY_ONCE
from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery import reconcile
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.delivery.resume import Resumption
from kappa_ingest.errors import KappaError
from kappa_ingest.kafka import topics
from kappa_ingest.kafka.retention import past_retention
from kappa_ingest.kafka.settings import kafka_python_connection
from kappa_ingest.pipeline.sending import Sent
from kappa_ingest.sinks.task_stats import NO_RECORDS_MS
from kappa_ingest.source.records import iso_ms, wall_clock_ms

Check = tuple[str, bool, Any, Any]  # (name, ok, expected, actual), as RunReport.check takes them


@dataclass(frozen=True)
class Counted:
    """What the run's report counted of its tasks, that the topic is checked against."""

    rows_sent: int
    rows_quarantined: int
    failed_attempts: int  # task attempts Spark counted as failed
    attempts: int  # task attempts of the sending stages


@dataclass(frozen=True)
class DeadLetters:
    """The dead-letter topic's account of the run."""

    topic: str
    rows: int  # the run's quarantined rows, each sent there
    found: int  # the run's dead letters read back (read_committed)


@dataclass(frozen=True)
class Reconciled:
    """The broker's account of the run: the verdict, its other checks, who else wrote."""

    verdict: reconcile.Verdict
    checks: list[Check]  # the dead-letter topic's; the broker-side sampler's
    other_producers: int = 0  # other producers that wrote to the topic during the run
    dead_letters: DeadLetters | None = None
    failure: KappaError | None = None  # the dead-letter topic could not be read back: the run fails


def reconcile_run(
    cfg: IngestConfig, sent: Sent, resumption: Resumption | None, entries: list[Entry], counted: Counted
) -> Reconciled:
    """The broker's account of the run: offsets if they balance exactly, else a read back."""
    assert sent.after is not None
    failpoints.hold(failpoints.BEFORE_RECONCILE, cfg.run_id)
    stats = sent.outcome.stats
    delta = offset_delta(sent.before, sent.after)
    own = sum(s.rows_sent for s in stats)
    growth = reconcile.expected_growth(own, [s.markers for s in stats if s.transactions])
    failed = counted.failed_attempts
    sent_by_file: dict[str, int] = {}
    for e in entries:
        sent_by_file[e.unit.file] = sent_by_file.get(e.unit.file, 0) + e.rows_sent
    located = {units: runs for s in stats for units, runs in s.offset_runs().items()}
    rows_of = {e.unit: e.rows_sent for e in entries}
    sent_by_transaction = {g: sum(rows_of[u] for u in g) for g in located if all(u in rows_of for u in g)}
    others = 0
    if resumption is not None:
        # The runs before this one may have sent rows of the units this one sends: count them all.
        runs = set(resumption.lineage_runs) | {e.run_id for e in resumption.delivered.values()}
        start = {p: resumption.root_offsets_before.get(p, o) for p, o in sent.before.items()}
        found = reconcile.read_back(sent.conf, cfg.topic, start, sent.after, runs, located=located)
        rows_by_file: dict[str, int] = {}
        for e in [*resumption.delivered.values(), *entries]:
            rows_by_file[e.unit.file] = rows_by_file.get(e.unit.file, 0) + e.rows_sent
        mine = reconcile.check(cfg.delivery, counted.rows_sent, delta, growth, failed, found, cfg.run_id, sent_by_file,
                               sent_by_transaction)  # fmt: skip
        lineage = reconcile.check_lineage(cfg.delivery, found, runs, rows_by_file)
        by_unit = [c for c in mine.checks if c[0] == reconcile.UNIT_BY_UNIT]
        verdict = reconcile.Verdict([*mine.checks[:1], *by_unit, *lineage.checks], lineage.verified_by,
                                    lineage.duplicates, lineage.duplicates_by_file)  # fmt: skip
    else:
        found = None
        others, why = other_writers(cfg, sent, counted.attempts)
        if cfg.verify == "read-back" or failed or growth is None or delta != growth or why:
            found = reconcile.read_back(sent.conf, cfg.topic, sent.before, sent.after, {cfg.run_id},
                                        located=located)  # fmt: skip
        verdict = reconcile.check(cfg.delivery, counted.rows_sent, delta, growth, failed, found, cfg.run_id,
                                  sent_by_file, sent_by_transaction)  # fmt: skip
    checks: list[Check] = []
    dead_letters, failure = None, None
    if sent.dead_letters is not None:
        try:
            dead_letters = reconcile_dead_letters(cfg, sent, counted.rows_quarantined)
            checks.append(dead_letters_check(cfg.delivery, dead_letters, failed))
        except KappaError as e:  # the data topic's verdict is reported all the same
            failure = e
    if sent.sampled:  # what its own client read in between
        low, high = sum(sent.before.values()), sum(sent.after.values())
        checks.append(("broker-side sampler's readings lie within the run's offsets",
                       low <= min(sent.sampled) and max(sent.sampled) <= high, f"{low}..{high}",
                       f"{min(sent.sampled)}..{max(sent.sampled)}"))  # fmt: skip
    return Reconciled(verdict, checks, others, dead_letters, failure)


def retention_warning(cfg: IngestConfig, sent: Sent) -> str | None:
    """Why the broker is about to delete records of the run, or None: stamped with their
    event time, the oldest are older than the topic keeps records (a replay of 2012 into a
    topic of Kafka's default seven days, say). The run succeeded; its records then go."""
    oldest = min((s.oldest_ms for s in sent.outcome.stats), default=NO_RECORDS_MS)
    if not cfg.event_time_column or oldest == NO_RECORDS_MS or sent.kept is None:
        return None
    return past_retention(sent.kept.admin(cfg.producer_settings()), cfg.topic, iso_ms(oldest), wall_clock_ms())


def offset_delta(before: dict[int, int], after: dict[int, int]) -> int:
    """How far the topic's high watermarks moved (a partition added meanwhile counted from 0)."""
    return sum(after.values()) - sum(before.get(p, 0) for p in after)


UNSEEN_WRITERS = "the brokers did not say which producers wrote to the topic"


def other_writers(cfg: IngestConfig, sent: Sent, attempts: int) -> tuple[int, str | None]:
    """Why the topic's offsets cannot vouch for the run alone, if they cannot: another
    producer wrote to it meanwhile (its records could make up for lost ones). Seen by the
    partition leaders' producer state (idempotent and transactional producers; a plain one
    is not seen: --verify read-back reads the topic back in any case). Returns how many
    others wrote, and the reason."""
    if sent.producers_before is None:
        return 0, UNSEEN_WRITERS
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
            return 0, UNSEEN_WRITERS
        kept.keep_producers(cfg.topic, partitions, after)  # the next run's "before" (a writer in between: another)
        wrote = topics.writers(sent.producers_before, after)
    if ours_asked is not None:
        others = wrote - ours_asked.result()
    else:  # one idempotent producer per task attempt at most (the spark sink's: per executor)
        attempts = attempts or len(sent.outcome.stats)
        others = wrote if len(wrote) > attempts else set()
    if not others:
        return 0, None
    return len(others), f"{len(others)} other producer(s) wrote to the topic during the run"


def reconcile_dead_letters(cfg: IngestConfig, sent: Sent, rows: int) -> DeadLetters:
    """The dead-letter topic holds every quarantined row of the run (each task sends its
    rejects there as it quarantines them): read back, read_committed."""
    assert sent.dead_letters is not None and cfg.dead_letter_topic
    start, end = sent.dead_letters
    found = reconcile.read_back(sent.conf, cfg.dead_letter_topic, start, end, {cfg.run_id}).of({cfg.run_id})
    return DeadLetters(cfg.dead_letter_topic, rows, found)


def dead_letters_check(mode: str, d: DeadLetters, failed_attempts: int) -> Check:
    """Each dead letter once; at least once where a retried at-least-once task sent its
    dead letters again, as it does its rows."""
    if mode == EXACTLY_ONCE or not failed_attempts:
        return "the dead-letter topic holds each dead letter once (read_committed)", d.found == d.rows, d.rows, d.found
    return "the dead-letter topic holds every dead letter (read_committed)", d.found >= d.rows, f">= {d.rows}", d.found
