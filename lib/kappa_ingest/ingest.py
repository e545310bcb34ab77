"""The ingest job: CSV files → JSON records → a Kafka topic, measured.

    source   = csv_source.read(spark, cfg)           # parse, mark rows to quarantine
    stats    = sinks.send(cfg.sink, source.df, ...)  # convert + produce, per partition
    metrics  = spark_metrics.collect(spark, group)   # Spark's own task and stage records
    report   = RunReport(...)                        # joined, checked, recorded, printed

Whatever happens, ``summary.json`` is written with the run's status, and the run's clock
(``phases``) says where the time went from the command's start.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from kappa_ingest import broker_rate, csv_source, metrics_store, quarantine, sinks, spark_metrics, warmup
from kappa_ingest.broker_rate import BrokerRateSampler
from kappa_ingest.config import IngestConfig
from kappa_ingest.errors import InputError, KafkaUnavailable, KappaError
from kappa_ingest.kafka_endpoint import KafkaEndpoint, endpoint_for
from kappa_ingest.phases import RunClock
from kappa_ingest.progress import Progress, estimate_rows
from kappa_ingest.records import Encoded
from kappa_ingest.report import RunReport, render
from kappa_ingest.sinks.partition_runner import run_partitions
from kappa_ingest.topics import Admin


class _Discard:
    """The dry run's producer: converts everything, sends nothing."""

    def send(self, enc: Encoded, run_id: str) -> None:
        pass

    def close(self) -> None:
        pass


def ingest(
    cfg: IngestConfig,
    spark: SparkSession,
    echo: bool = True,
    *,
    clock: RunClock | None = None,
    kafka: KafkaEndpoint | None = None,
    release: Callable[[], None] | None = None,
) -> RunReport:
    """Run one ingest; returns its report (also recorded, written to summary.json and printed).

    ``clock`` has the command's start (default: now); ``kafka`` the run's Kafka (default:
    from ``cfg``, started here if need be); ``release`` is called once the run needs Spark
    and Kafka no more, before recording (the CLI stops both there, so that the user does
    not wait for them after the report). Raises a KappaError subclass (carrying the
    contract's exit code) on failure, after the report has been written with ``status: failed``.
    """
    clock = clock or RunClock()
    clock.end("startup")
    report = RunReport(cfg.run_id, cfg.sink, cfg.topic, cfg.masked(), clock=clock, dry_run=cfg.dry_run)
    report.spark_master = spark.sparkContext.master
    report.counted_by = "dry run: rows converted, none sent" if cfg.dry_run else sinks.COUNTED_BY[cfg.sink]
    run_dir = f"{cfg.metrics_dir}/runs/{cfg.run_id}"
    owns_kafka = kafka is None
    try:
        kafka = kafka or endpoint_for(cfg, spark.sparkContext.master)
        warming = warmup.start(spark, cfg.sink)  # overlaps reading the header and setting up Kafka
        source = csv_source.read(spark, cfg)
        report.read_path = source.mode
        sc = spark.sparkContext
        group = f"kappa-ingest-{cfg.run_id}"
        sc.setJobGroup(group, f"kappa-ingest {cfg.run_id}: {cfg.sink} -> {cfg.topic}")
        rate = _rate_per_task(cfg, spark, source)
        if cfg.dry_run:
            warming.join()
            clock.end("setup")
            spark_metrics.warm(spark)
            stats = _spark_errors(lambda: run_partitions(source.df, source.spec, source.parser, _Discard, rate))
            clock.end("sending")
        else:
            stats, before, after = _send(cfg, spark, source, kafka, report, warming, rate, echo)
        report.add_run(stats, spark_metrics.collect(spark, group))
        if not cfg.dry_run:
            _check_broker(report, before, after)
        if report.rows_quarantined:
            path = f"{run_dir}/quarantine"
            reasons = _spark_errors(lambda: quarantine.write(source, path))
            report.quarantine = {"rows": sum(reasons.values()), "path": path, "reasons": reasons}
            report.check("quarantine holds every quarantined row", report.quarantine["rows"] == report.rows_quarantined,
                         report.rows_quarantined, report.quarantine["rows"])  # fmt: skip
        report.check_counts()
        report.status = "succeeded" if report.consistent else "failed"
        if not report.consistent:
            report.error = "counts do not reconcile: " + "; ".join(c["name"] for c in report.checks if not c["ok"])
        sc.setJobGroup(None, None)  # type: ignore[arg-type]
    except KappaError as e:
        report.status, report.error = e.status, str(e)
        raise
    except Exception as e:
        report.status, report.error = "failed", f"{type(e).__name__}: {_first_line(e)}"
        raise
    finally:
        clock.end("reconcile")  # a failed run's last phase takes its time up to here
        releasing = threading.Thread(target=_release, args=(release, kafka if owns_kafka else None), name="release")
        releasing.start()  # Spark and Kafka stop while the store is written
        path = _record(cfg, report, releasing)
        if echo:
            print(render(report.summary()))
            print(f"report: {path}")
    if not report.consistent:
        raise _reconciliation_error(report, path)
    return report


def _send(
    cfg: IngestConfig,
    spark: SparkSession,
    source: csv_source.Source,
    kafka: KafkaEndpoint,
    report: RunReport,
    warming: threading.Thread,
    rate: float | None,
    echo: bool,
) -> tuple[list, dict[int, int], dict[int, int]]:
    """Set up the topic, send, and read the settled end offsets: (task stats, offsets before, after)."""
    servers = kafka.servers()
    report.bootstrap_servers = servers
    report.broker["embedded"] = kafka.embedded
    settings = cfg.producer_settings()
    with Admin(servers, settings) as admin:
        admin.check_reachable()
        if admin.ensure_topic(cfg.topic, cfg.topic_partitions, cfg.replication_factor):
            report.broker["topic_created"] = True
        before = admin.end_offsets(cfg.topic)
        progress = Progress(estimate_rows(list(source.files), cfg.header), quiet=cfg.quiet or not echo)
        warming.join()
        report.clock.end("setup")
        spark_metrics.warm(spark)
        sampler = BrokerRateSampler(servers, cfg.topic, settings, on_sample=progress.update).start()
        try:
            stats = _spark_errors(lambda: sinks.send(cfg.sink, source, cfg.topic, settings, servers, rate))
        finally:
            report.clock.end("sending")
            report.broker_rate = sampler.stop()
            progress.close()
        after = _settled_offsets(admin, cfg.topic, before, sum(st.rows_sent for st in stats))
    return stats, before, after


def _check_broker(report: RunReport, before: dict[int, int], after: dict[int, int]) -> None:
    """The broker's account: offsets, and the sampler's curve agreeing with them."""
    report.check_offsets(before, after)
    report.broker["rate"] = broker_rate.figures(report.broker_rate)
    sampled = report.broker_rate[-1]["offsets_total"] - report.broker_rate[0]["offsets_total"]
    report.check("broker-side sampler saw the offset delta", sampled == report.broker["offset_delta"],
                 report.broker["offset_delta"], sampled)  # fmt: skip


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
    if missing > 0:
        return KafkaUnavailable(
            f"Kafka holds {missing:,} fewer new records than the {report.sink} sink reported sent"
            f" ({report.broker['offset_delta']:,} of {report.rows_sent:,}): the broker refused records"
            f" without the sink noticing; see {path}"
        )
    return KappaError(
        f"run {report.run_id} finished, but its counts do not reconcile; see the CHECK FAILED lines in {path}"
    )


def _record(cfg: IngestConfig, report: RunReport, releasing: threading.Thread) -> Path:
    """Append the run to the Delta metrics store and write summary.json.

    The per-task, stage, executor and broker-rate rows go first (while ``releasing`` stops
    Spark and Kafka); then the run's end is stamped and its totals row and summary.json
    written, so ``wall_s`` and ``phases`` include the recording. A store that cannot be written is a warning on stderr, not a
    lost run (summary.json holds everything).
    """
    details = metrics_store.run_rows(report.summary())
    del details["runs"]
    try:
        metrics_store.append(cfg.metrics_dir, details)
        recorded = True
    except Exception as e:  # noqa: BLE001 - the run itself is done and reported
        _store_warning(cfg, e)
        recorded = False
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
    admin: Admin, topic: str, before: dict[int, int], sent: int, timeout_s: float = 10.0
) -> dict[int, int]:
    """End offsets once the broker has appended what was sent. With ``acks=0`` (or 1 and a
    lagging replica) producers finish before the log does; wait, bounded, until the
    offsets reach ``sent`` or stop moving for a second."""
    import time

    base = sum(before.values())
    after = admin.end_offsets(topic)
    deadline = time.monotonic() + timeout_s
    still_since = time.monotonic()
    while sum(after.values()) - base < sent and time.monotonic() < deadline:
        time.sleep(0.2)
        now = admin.end_offsets(topic)
        if sum(now.values()) != sum(after.values()):
            still_since = time.monotonic()
        elif time.monotonic() - still_since > 1.0:
            break
        after = now
    return after


def _rate_per_task(cfg: IngestConfig, spark: SparkSession, source: csv_source.Source) -> float | None:
    """The job-wide --target-rate split over the tasks that run at once."""
    if cfg.target_rate is None:
        return None
    partitions = source.df.rdd.getNumPartitions()
    concurrent = max(1, min(partitions, spark.sparkContext.defaultParallelism))
    return cfg.target_rate / concurrent


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# What a failed Spark job's message means, for the one line people get.
_CAUSES = [
    (re.compile(r"DeliveryFailed: (.*)"), KafkaUnavailable, "{0}"),
    (re.compile(r"HeaderMismatch: (.*)"), InputError, "{0}"),
    (re.compile(r"(kafka\.errors\.\w+|KafkaTimeoutError|KafkaException)[:\s]*(.*)"), KafkaUnavailable,
     "Kafka refused or did not answer the producer: {0}: {1}"),
    (re.compile(r"(SaslAuthenticationException|AuthorizationException)[:\s]*(.*)"), KafkaUnavailable,
     "Kafka refused the producer: {0}: {1}"),
    (re.compile(r"(org\.apache\.kafka\.common\.errors\.\w+Exception)[:\s]*(.*)"), KafkaUnavailable,
     "Kafka refused the records: {0}: {1}"),
    (re.compile(r"(FileNotFoundException|PATH_NOT_FOUND)[:\s]*(.*)"), InputError,
     "input disappeared or is unreadable: {1}; check --input"),
    (re.compile(r"CSV header does not conform to the schema.*?(Header: .*)"), InputError,
     "the input files' headers differ ({0}); ingest files with one header per run"),
    (re.compile(r"(MALFORMED_RECORD_IN_PARSING|MalformedInputException|CharacterCodingException)(.*)"), InputError,
     "input cannot be decoded as configured: {0}{1}; check --encoding and the CSV dialect"),
]  # fmt: skip


def _spark_errors(action):  # type: ignore[no-untyped-def]
    """Run a Spark action; map a failed job to the error that names its cause."""
    try:
        return action()
    except KappaError:
        raise
    except Exception as e:
        text = str(e)
        for pattern, kind, message in _CAUSES:
            m = pattern.search(text)
            if m:
                raise kind(message.format(*(g.strip()[:300] for g in m.groups()))) from e
        raise KappaError(f"the Spark job failed: {_cause_line(text)[:400]}") from e


def _cause_line(text: str) -> str:
    """The line that names the cause: a Python traceback's last ``XxxError: ...`` line if
    the failure came from a Python worker, else the message's first line."""
    errors = re.findall(r"^([\w.]+(?:Error|Exception|Failed|Mismatch): .+)$", text, flags=re.MULTILINE)
    python_side = [line for line in errors if not line.startswith(("org.", "java."))]
    if "Python worker" in text and python_side:
        return python_side[0]
    return text.strip().splitlines()[0] if text.strip() else "unknown error"
