"""The ingest job: CSV files → JSON records → a Kafka topic, measured.

    source   = csv_source.read(spark, cfg)           # parse, mark rows to quarantine
    stats    = sinks.send(cfg.sink, source.df, ...)  # convert + produce, per partition
    metrics  = spark_metrics.collect(spark, group)   # Spark's own task and stage records
    report   = RunReport(...)                        # joined, checked, printed, written

Whatever happens, ``summary.json`` is written with the run's status.
"""

from __future__ import annotations

import contextlib
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

from kappa_ingest import broker_rate, csv_source, local_kafka, metrics_store, quarantine, sinks, spark_metrics, warmup
from kappa_ingest.broker_rate import BrokerRateSampler
from kappa_ingest.config import IngestConfig
from kappa_ingest.errors import InputError, KafkaUnavailable, KappaError, UsageError
from kappa_ingest.progress import Progress, estimate_rows
from kappa_ingest.records import Encoded
from kappa_ingest.report import RunReport, render
from kappa_ingest.sinks.partition_runner import run_partitions
from kappa_ingest.topics import Admin

LOCAL_KAFKA_DIR = ".kafka"  # where `kappa-ingest kafka start` keeps a long-lived local broker


@contextlib.contextmanager
def kafka_for(cfg: IngestConfig, spark: SparkSession, report: RunReport) -> Iterator[str]:
    """The bootstrap servers to use: configured ones; else a running `kappa-ingest kafka
    start` broker; else an embedded broker started for this run and stopped after it."""
    if cfg.bootstrap_servers:
        yield cfg.bootstrap_servers
        return
    if not spark.sparkContext.master.startswith("local"):
        raise UsageError(
            "no --bootstrap-servers: give the Kafka cluster (the embedded broker runs only with a local master)"
        )
    running = local_kafka.status(LOCAL_KAFKA_DIR)
    if running is not None:
        yield running.bootstrap_servers
        return
    with tempfile.TemporaryDirectory(prefix="kappa-kafka-") as state:
        cluster = local_kafka.start(state)
        report.broker["embedded"] = True
        try:
            yield cluster.bootstrap_servers
        finally:
            cluster.stop()


def preflight(cfg: IngestConfig) -> None:
    """Fail fast, before Spark starts: the inputs exist, and a configured Kafka answers."""
    csv_source.resolve_inputs(cfg.inputs)
    if cfg.bootstrap_servers and not cfg.dry_run:
        admin = Admin(cfg.bootstrap_servers, cfg.producer_settings())
        admin.check_reachable()
        admin.close()


class _Discard:
    """The dry run's producer: converts everything, sends nothing."""

    def send(self, enc: Encoded, run_id: str) -> None:
        pass

    def close(self) -> None:
        pass


def ingest(cfg: IngestConfig, spark: SparkSession, echo: bool = True) -> RunReport:
    """Run one ingest; returns its report (also written to summary.json and printed).

    Raises a KappaError subclass (carrying the contract's exit code) on failure, after the
    report has been written with ``status: failed``.
    """
    report = RunReport(cfg.run_id, cfg.sink, cfg.topic, cfg.masked(), dry_run=cfg.dry_run)
    report.spark_master = spark.sparkContext.master
    report.counted_by = "dry run: rows converted, none sent" if cfg.dry_run else sinks.COUNTED_BY[cfg.sink]
    run_dir = f"{cfg.metrics_dir}/runs/{cfg.run_id}"
    try:
        warming = warmup.start(spark, cfg.sink)  # overlaps reading the header and setting up Kafka
        source = csv_source.read(spark, cfg)
        report.read_path = source.mode
        sc = spark.sparkContext
        group = f"kappa-ingest-{cfg.run_id}"
        sc.setJobGroup(group, f"kappa-ingest {cfg.run_id}: {cfg.sink} -> {cfg.topic}")
        rate = _rate_per_task(cfg, spark, source)
        if cfg.dry_run:
            stats = _spark_errors(lambda: run_partitions(source.df, source.spec, source.parser, _Discard, rate))
        else:
            with kafka_for(cfg, spark, report) as servers:
                report.bootstrap_servers = servers
                settings = cfg.producer_settings()
                admin = Admin(servers, settings)
                admin.check_reachable()
                if admin.ensure_topic(cfg.topic, cfg.topic_partitions, cfg.replication_factor):
                    report.broker["topic_created"] = True
                before = admin.end_offsets(cfg.topic)
                progress = Progress(estimate_rows(list(source.files), cfg.header), quiet=cfg.quiet or not echo)
                warming.join()
                sampler = BrokerRateSampler(servers, cfg.topic, settings, on_sample=progress.update).start()
                try:
                    stats = _spark_errors(lambda: sinks.send(cfg.sink, source, cfg.topic, settings, servers, rate))
                finally:
                    report.broker_rate = sampler.stop()
                    progress.close()
                after = _settled_offsets(admin, cfg.topic, before, sum(st.rows_sent for st in stats))
                admin.close()
        report.add_run(stats, spark_metrics.collect(spark, group))
        if not cfg.dry_run:
            report.check_offsets(before, after)
            report.broker["rate"] = broker_rate.figures(report.broker_rate)
            sampled = report.broker_rate[-1]["offsets_total"] - report.broker_rate[0]["offsets_total"]
            report.check("broker-side sampler saw the offset delta", sampled == report.broker["offset_delta"],
                         report.broker["offset_delta"], sampled)  # fmt: skip
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
        path = report.finish(cfg.metrics_dir)
        _record(spark, cfg, report)
        if echo:
            print(render(report.summary()))
            print(f"report: {path}")
    if not report.consistent:
        raise _reconciliation_error(report, path)
    return report


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


def _record(spark: SparkSession, cfg: IngestConfig, report: RunReport) -> None:
    """Append the run to the Delta metrics store; a store that cannot be written is a
    warning on the report, not a lost run (summary.json holds everything)."""
    try:
        metrics_store.record_run(spark, cfg.metrics_dir, report.summary())
    except Exception as e:  # noqa: BLE001 - the run itself is done and reported
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
