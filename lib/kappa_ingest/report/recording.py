"""A run's report from start to record: made when the run starts (or for a run that failed
before it had one), ended early when there is nothing to send, and recorded: the Delta
store and ``summary.json``."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from kappa_ingest import sinks
from kappa_ingest.config import IngestConfig
from kappa_ingest.delivery.incremental import Selection
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.delivery.lock import Lock
from kappa_ingest.delivery.resume import Resumption
from kappa_ingest.delivery.work import Work
from kappa_ingest.errors import KafkaUnavailable, KappaError, first_line
from kappa_ingest.kafka.credentials import mask
from kappa_ingest.report import store
from kappa_ingest.report.phases import RunClock
from kappa_ingest.report.run import RunReport, render
from kappa_ingest.s3.directory import Directory


def new_report(cfg: IngestConfig, clock: RunClock, held: Lock | None = None) -> RunReport:
    report = RunReport(cfg.run_id, cfg.sink, cfg.topic, cfg.masked(), clock=clock, dry_run=cfg.dry_run)
    report.counted_by = "dry run: rows converted, none sent" if cfg.dry_run else sinks.COUNTED_BY[cfg.sink]
    report.delivery = {"mode": cfg.delivery, "lineage": cfg.lineage, "resumed_from": cfg.resume,
                       "splits_skipped": 0, "rows_skipped": 0, "transactions_committed": 0,
                       "transactions_aborted": 0}  # fmt: skip
    if held is not None:
        report.delivery["lock"] = held.summary()
    return report


def failed_report(cfg: IngestConfig, clock: RunClock, e: BaseException, what: str = "") -> str:
    """The report of a run that failed before it had one of its own (``what`` it was doing,
    for an error that is not one of ours)."""
    error = str(e) if isinstance(e, KappaError) else f"{what}{type(e).__name__}: {first_line(e)}"
    report = new_report(cfg, clock)
    report.status, report.error = "failed", error
    return finish(report, cfg.metrics.quick())  # the store itself may be what failed: one attempt


def add_selection(report: RunReport, s: Selection) -> None:
    report.incremental = s.summary
    report.delivery.update(splits_skipped=len(s.delivered), rows_skipped=sum(e.rows_sent for e in s.delivered.values()))


def add_resumption(report: RunReport, r: Resumption) -> None:
    report.delivery.update(resumed_from=r.resumed_from, splits_skipped=len(r.delivered), rows_skipped=r.rows_skipped)


def nothing_left(
    cfg: IngestConfig, work: Work, servers: str, clock: RunClock, echo: bool = True, held: Lock | None = None
) -> RunReport:
    """A run whose work is all delivered already: its report, without Spark (``servers``: its Kafka)."""
    if work.resumption is not None:
        return _nothing_to_send(cfg, work.resumption, clock, echo, held)
    assert work.selection is not None
    return _nothing_new(cfg, work.selection, servers, clock, echo, held)


def _nothing_new(
    cfg: IngestConfig, s: Selection, servers: str, clock: RunClock, echo: bool, held: Lock | None
) -> RunReport:
    """An incremental run with nothing new to send: its report, without Spark."""
    clock.end("sending")
    report = new_report(cfg, clock, held)
    add_selection(report, s)
    report.bootstrap_servers = servers
    report.status, report.error = "succeeded", None
    path = record(cfg, report, None, [])
    if echo:
        print(render(report.summary()))
        done, left = s.summary["files_delivered_before"], s.summary["files_left"]
        why = f"all {done:,} input files are already delivered to {cfg.topic}" if not left else "nothing selected"
        print(f"sent 0 rows: {why} (the ledger {cfg.ledger_topic})")
        print(f"report: {path}")
    return report


def _nothing_to_send(cfg: IngestConfig, r: Resumption, clock: RunClock, echo: bool, held: Lock | None) -> RunReport:
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
    path = record(cfg, report, None, [])
    if echo:
        print(render(report.summary()))
        print(f"sent 0 rows: all {len(r.delivered):,} splits of run {r.resumed_from} were already delivered")
        print(f"report: {path}")
    return report


def record(cfg: IngestConfig, report: RunReport, releasing: threading.Thread | None, entries: list[Entry]) -> str:
    """Append the run to the Delta metrics store and write summary.json.

    The per-task, stage, executor, broker-rate and ledger rows go first (while
    ``releasing`` stops Spark and Kafka); then the run's end is stamped and its totals row
    and summary.json written, so ``wall_s`` and ``phases`` include the recording. A store
    that cannot be written is a warning on stderr, not a lost run (summary.json holds everything).
    """
    details = store.run_rows(report.summary())
    del details["runs"]
    details["ledger"] = store.ledger_rows(entries)
    try:
        store.append(cfg.metrics, details)
        recorded = True
    except Exception as e:  # noqa: BLE001 - the run itself is done and reported
        _store_warning(cfg, e)
        recorded = False
    if releasing is not None:
        releasing.join()
    path = finish(report, cfg.metrics)
    if recorded:
        try:
            store.append(cfg.metrics, {"runs": store.run_rows(report.summary())["runs"]})
        except Exception as e:  # noqa: BLE001
            _store_warning(cfg, e)
    return path


class Recorder:
    """Writes on a thread of its own, one call at a time in the order given: a watch's next
    batch starts sending while the last one's Delta rows are appended (a fraction of a
    second each). :meth:`close` waits for every call given."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(1, thread_name_prefix="recorder")

    def submit(self, fn: Callable[..., object], *args: object) -> None:
        self._pool.submit(_warning_only, fn, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _warning_only(fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - what was sent is in the topic; its record is what failed
        print(f"kappa-ingest: warning: not recorded: {mask(first_line(e))[:300]}", file=sys.stderr)


def record_later(recorder: Recorder, cfg: IngestConfig, report: RunReport, entries: list[Entry]) -> str:
    """:func:`record` for a watch's batch: its end stamped and summary.json written now, its
    Delta rows appended on ``recorder``'s thread (in the order given) while the watch goes on."""
    path = finish(report, cfg.metrics)
    details = store.run_rows(report.summary())
    runs = details.pop("runs")
    details["ledger"] = store.ledger_rows(entries)
    recorder.submit(_append_run, cfg, details, runs)
    return path


def _append_run(cfg: IngestConfig, details: dict[str, list[dict]], runs: list[dict]) -> None:
    try:
        store.append(cfg.metrics, details)
        store.append(cfg.metrics, {"runs": runs})  # last: a run in `runs` has its details
    except Exception as e:  # noqa: BLE001 - the run itself is done and reported
        _store_warning(cfg, e)


def finish(report: RunReport, where: Directory) -> str:
    """Stamp the report's end and write its summary.json; where it is. A directory that
    cannot be written is a warning: the run's own outcome (its error, its exit code) is
    what the command ends with, not the report's."""
    try:
        return report.finish(where)
    except (OSError, KappaError) as e:
        print(f"kappa-ingest: warning: the run's report was not written to {where}: {mask(first_line(e))[:300]}",
              file=sys.stderr)  # fmt: skip
        return report.path(where)


def _store_warning(cfg: IngestConfig, e: Exception) -> None:
    print(f"kappa-ingest: warning: run not recorded in {cfg.metrics_dir}/delta: {mask(first_line(e))[:200]}",
          file=sys.stderr)  # fmt: skip


def reconciliation_error(report: RunReport, path: str) -> KappaError:
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
