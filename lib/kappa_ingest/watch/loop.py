"""The watch: one long-lived driver that sends each file landing in a directory (or under
an ``s3://`` prefix) through the ingest pipeline, batch after batch, every row once.

    resources.hold()                        # the topic's lock, for as long as the watch runs
    delivered.catch_up(present=...)         # the ledger: what is in the topic already
    delivered.first_start(...)              # the files there at the first start, passed over
    loop:
        ready = discovery.ready(...)        # still long enough, not a writer's scratch name
        batch = self._choose(ready)         # new and half-sent files, overwritten ones refused
        report = ingest.run(batch_cfg, ...) # the same pipeline as `ingest`, Spark kept warm
        delivered.catch_up()                # the batch's commits, from the ledger
        disposal.after_send(...)            # keep, delete or move what is now in the topic

A batch is an ``--incremental`` run of the files chosen (the topic's transactional ids, so
that a watch restarted after ``kill -9``, or an ``ingest --incremental``, writes each unit
under the id the killed one did: fenced, never twice). What was sent is known from the
ledger alone.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kappa_ingest import failpoints
from kappa_ingest.config import IngestConfig
from kappa_ingest.config.choices import EXACTLY_ONCE
from kappa_ingest.delivery import incremental
from kappa_ingest.delivery.work import Work
from kappa_ingest.errors import InputError, KafkaUnavailable, KappaError, first_line
from kappa_ingest.ingest import run
from kappa_ingest.kafka.settings import connection_conf
from kappa_ingest.pipeline.resources import RunResources
from kappa_ingest.report import store
from kappa_ingest.report.phases import RunClock
from kappa_ingest.report.recording import Recorder
from kappa_ingest.s3.access import S3Access, is_s3
from kappa_ingest.source import opening
from kappa_ingest.source.splits import InputFile
from kappa_ingest.spark import warmup
from kappa_ingest.spark.job_groups import group_of
from kappa_ingest.watch import disposal
from kappa_ingest.watch.delivered import Delivered, Standing
from kappa_ingest.watch.discovery import Discovery
from kappa_ingest.watch.exposition import WatchMetrics
from kappa_ingest.watch.landing import Landed, list_landed
from kappa_ingest.watch.settings import WatchSettings

RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0  # a failed batch is retried after this, doubling
KEEP_WARM_S = 40.0  # an idle watch warms its Python workers again after this (Spark ends them after 60 s idle)


@dataclass
class BatchResult:
    """One batch, as the watch tells it."""

    run_id: str
    files: list[str]
    status: str  # succeeded | failed | stopped
    rows_sent: int = 0
    wall_s: float = 0.0
    latency_s: dict[str, float] = field(default_factory=dict)  # per file sent: landing to commit
    error: str | None = None


@dataclass
class WatchSummary:
    watch_id: str
    batches: list[BatchResult] = field(default_factory=list)
    files_sent: int = 0
    rows_sent: int = 0
    refused: dict[str, str] = field(default_factory=dict)  # path -> why (overwritten, unsendable)


class Watch:
    def __init__(self, cfg: IngestConfig, settings: WatchSettings, resources: RunResources, echo: bool = True) -> None:
        self.cfg, self.settings, self.resources, self.echo = cfg, settings, resources, echo
        self.metrics = WatchMetrics(cfg.run_id)
        self.summary = WatchSummary(cfg.run_id)
        self._stop = threading.Event()
        self._discovery: Discovery | None = None
        self._batch: IngestConfig | None = None
        self._refused: dict[str, tuple[int, int, str]] = {}  # path -> the identity refused (seen again: not again)
        self._landed_ms: dict[str, int] = {}
        self.started = threading.Event()  # set once the landing's files at the start are known
        self._waiting: list[Landed] = []  # seen, not yet sent (as of the last listing and batch)
        self._live = echo and sys.stdout.isatty()  # a status line kept up to date
        self.metrics_url: str | None = None
        self._last_job = time.monotonic()  # the last Spark job the watch ran (its workers used then)

    # -- stopping ---------------------------------------------------------------------------
    def stop(self) -> None:
        """End the watch: the batch under way is cancelled (what its tasks committed stays; the
        rest is aborted), and :meth:`run` returns. Safe from a signal handler."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._discovery is not None:
            self._discovery.wake()
        batch, spark = self._batch, self.resources.spark
        if batch is not None and spark is not None:  # on a thread: Py4J is not for a signal handler
            threading.Thread(target=spark.sparkContext.cancelJobGroup, args=(group_of(batch.run_id),),
                             daemon=True).start()  # fmt: skip

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> WatchSummary:
        s = self.settings
        opening.for_run(self.cfg.s3_endpoint)  # an s3:// landing's store: listed, and files moved, from here
        self.resources.hold()  # exit 6 if another run or watch sends to the topic
        conf = connection_conf(self.cfg.producer_settings(), self.resources.servers())
        access = S3Access.resolve(self.cfg.s3_endpoint) if is_s3(s.landing) else None
        delivered = Delivered(conf, self.cfg.ledger_topic, self.cfg.topic, s.landing, self.cfg.multiline)
        try:
            return self._watch(delivered, access)
        finally:
            delivered.close()  # its kept ledger reader

    def _watch(self, delivered: Delivered, access: S3Access | None) -> WatchSummary:
        s = self.settings
        found = list_landed(s.landing, access)
        delivered.catch_up(present=found)  # what was sent and is gone, kept by its identity alone
        delivered.first_start(found, s.include_existing, self.cfg.run_id)
        self._dispose_sent(delivered, found)  # a start after a crash between commit and clean-up
        self._warm()
        server = self.metrics.serve(s.metrics_port, s.metrics_host) if s.metrics_port is not None else None
        if server is not None:
            self.metrics_url = f"http://{s.metrics_host}:{server[0].server_port}/metrics"
            self._say(f"metrics: {self.metrics_url}")
        self.resources.recorder = Recorder()
        self.started.set()
        self._say(f"watching {s.landing} -> {self.cfg.topic} (watch {self.cfg.run_id}; stop with Ctrl-C)")
        try:
            with Discovery(s.landing, s.min_file_age_s, s.listing_period_s, access) as discovery:
                self._discovery = discovery
                number, idle = 0, False
                while not self.stopping:
                    # Idle: files ready but none to send (sent and kept, refused) are no reason to look again.
                    warm_for = KEEP_WARM_S - (time.monotonic() - self._last_job)
                    ready = discovery.ready(wait_s=max(0.1, min(s.listing_period_s, warm_for)), changed=idle)
                    if self.stopping:
                        break
                    chosen = self._choose(ready, delivered)
                    idle = chosen is None
                    if chosen is None:
                        self._keep_warm()
                        continue
                    number += 1
                    self._send(number, chosen, delivered)
                    self._last_job = time.monotonic()
        finally:
            self._discovery = None
            self.resources.recorder.close()  # every batch's report written before the watch ends
            self.resources.recorder = None
            if server is not None:
                server[0].shutdown()
            if self.stopping:
                self._abort_open()
            if self._live:
                sys.stdout.write("\r\x1b[K")
        return self.summary

    def _warm(self) -> None:
        """Make ready now what every batch needs, so the first file landing is not the one
        that waits for it: the Python workers started (and kept so), the topic made as a
        batch would make it, and the cluster's transaction coordinator up (on a cluster that
        never ran a transaction its first one creates Kafka's transaction log)."""
        from kappa_ingest.delivery import guarantees
        from kappa_ingest.pipeline.sending import create_topic

        spark = self.resources.spark
        assert spark is not None, "the watch's Spark starts before it runs"
        warming = warmup.start(spark, self.cfg.sink)
        settings, servers, kept = self.cfg.producer_settings(), self.resources.servers(), self.resources.kept()
        coordinator = None
        if self.cfg.delivery == EXACTLY_ONCE:
            scope = guarantees.scope_prefix(self.cfg.topic, self.cfg.lineage, incremental=True)
            coordinator = kept.warm_coordinator(connection_conf(settings, servers), scope)
        try:
            create_topic(kept.admin(settings), self.cfg.topic, self.cfg.topic_partitions,
                         self.cfg.replication_factor, self.cfg.topic_config)  # fmt: skip
        except KappaError as e:  # the first batch makes it, or rides the outage out
            self._say(f"warning: topic {self.cfg.topic} not made at the start ({first_line(e)[:160]})")
        warming.join()
        if coordinator is not None:
            coordinator.join(guarantees.INIT_TIMEOUT_S)
            kept.coordinator_warm = True
        self.resources.workers_warm = True
        self._rehearse()
        self._last_job = time.monotonic()

    def _rehearse(self) -> None:
        """A dry run of a small file of its own (converted, not sent, recorded nowhere the
        watch's runs are), so that the first batch does not pay Spark's first planning and
        code generation of the read and the send: 2-3 s of a first batch on 2 cores."""
        import tempfile
        from pathlib import Path

        from kappa_ingest import config, datagen

        with tempfile.TemporaryDirectory(prefix="kappa-watch-rehearsal-") as d:
            try:
                path = datagen.generate("debs2012", 200, Path(d) / "rehearsal.csv", seed=1)
                cfg = config.validate({"inputs": [str(path)], "topic": self.cfg.topic, "sink": self.cfg.sink,
                                       "run_id": f"{self.cfg.run_id}-rehearsal", "s3_endpoint": self.cfg.s3_endpoint,
                                       "metrics_dir": str(Path(d) / "metrics"), "dry_run": True, "quiet": True})  # fmt: skip
                run(cfg, self.resources, RunClock(), echo=False)
            except Exception as e:  # noqa: BLE001 - a first batch is slower, not wrong
                self._say(f"warning: the watch's rehearsal failed ({first_line(e)[:160]}); its first batch starts cold")
            finally:
                opening.for_run(self.cfg.s3_endpoint)  # the watch's store again (a run sets it)

    def _keep_warm(self) -> None:
        """An idle watch's workers warmed again before Spark ends them (an idle Python worker
        lives a minute): off the batches' path, on a thread; only time depends on it."""
        spark = self.resources.spark
        if spark is not None and time.monotonic() - self._last_job >= KEEP_WARM_S - 0.5:
            warmup.start(spark, self.cfg.sink)
            self._last_job = time.monotonic()

    def _abort_open(self) -> None:
        """The transactions a cancelled batch's tasks left open, aborted now rather than at
        the next start (fencing them: a task still finishing fails, its unit is not in)."""
        from kappa_ingest.delivery import guarantees
        from kappa_ingest.kafka.settings import kafka_python_connection

        settings, servers = self.cfg.producer_settings(), self.resources.servers()
        scope = guarantees.scope_prefix(self.cfg.topic, self.cfg.lineage, incremental=True)
        try:
            guarantees.end_lingering(connection_conf(settings, servers), kafka_python_connection(settings, servers),
                                     self.cfg.topic, [scope])  # fmt: skip
        except Exception as e:  # noqa: BLE001 - the next start ends them (its lock's end_lingering)
            self._say(f"warning: open transactions not aborted ({first_line(e)[:160]}); the next start ends them")

    def _choose(self, ready: list[Landed], delivered: Delivered) -> tuple[Work, list[Landed]] | None:
        """The next batch of ``ready`` files: half-sent ones first, then new ones, oldest first,
        within ``--max-files``/``--max-bytes``; files sent already are cleaned up, overwritten
        ones refused (or, with ``--allow-overwrites``, sent again as a new version)."""
        s = self.settings
        todo: list[tuple[Landed, Standing]] = []
        now_ms = time.time_ns() // 1_000_000
        for f in ready:
            if self._refused.get(f.path) == f.identity():
                continue
            st = delivered.standing(f)
            if st.state == "sent":
                self._dispose(f, delivered)
            elif st.state == "changed" and not s.allow_overwrites:
                self._refuse(f, "overwritten", f"input {f.path}: changed since it was sent"
                             f" ({_what_changed(st.before, f.identity())}); not sent again (--allow-overwrites sends"
                             " it as a new version)")  # fmt: skip
            elif st.state in ("new", "partial", "changed"):
                self._landed_ms.setdefault(f.path, max(f.mtime_ms, now_ms))  # seen (a rename) or written, the later
                todo.append((f, st))
        self._waiting = [f for f, _ in todo]
        self._backlog(now_ms)
        if not todo:
            return None
        work = self._work([st.file for _, st in todo], delivered, s.max_files, s.max_bytes)
        if work.selection is None or not work.selection.paths:
            return None
        by_path = {st.file.path: f for f, st in todo}
        return work, [by_path[p] for p in work.selection.paths]

    def _send(self, number: int, chosen: tuple[Work, list[Landed]], delivered: Delivered) -> None:
        """Run one batch, again after a Kafka outage (until ``--outage-limit``), without a
        file found unsendable; then record what the ledger says it sent."""
        work, files = chosen
        outage_since: float | None = None
        wait = RETRY_FIRST_S
        attempt = 0
        while files and not self.stopping:
            if work.nothing_left:  # what a failed attempt left is in the topic all the same
                return
            attempt += 1
            cfg = self._batch_cfg(number, attempt, files)
            started = time.monotonic()
            self._batch = cfg
            failpoints.hold(failpoints.WATCH_CHOSEN, cfg.run_id)
            try:
                report = run(cfg, self.resources, RunClock(), work, echo=False)
                failpoints.hold(failpoints.WATCH_SENT, cfg.run_id)
                result = BatchResult(cfg.run_id, [f.path for f in files], "succeeded", report.rows_sent,
                                     time.monotonic() - started)  # fmt: skip
            except KappaError as e:
                result = BatchResult(cfg.run_id, [f.path for f in files], "stopped" if self.stopping else "failed",
                                     wall_s=time.monotonic() - started, error=str(e))  # fmt: skip
                if self.stopping:
                    self._ended(result, delivered, files)
                    return
                bad = _named_file(e, files)
                if isinstance(e, InputError) and bad is not None:
                    self._ended(result, delivered, files)
                    self._unsendable(bad, str(e))
                    files = [f for f in files if f is not bad and f.path not in result.latency_s]
                    work = self._rechosen(files, delivered)
                    continue
                if not isinstance(e, KafkaUnavailable):
                    self._ended(result, delivered, files)
                    raise
                outage_since = outage_since or started
                self._ended(result, delivered, files)
                files = [f for f in files if f.path not in result.latency_s]  # counted: committed by this attempt
                if time.monotonic() - outage_since > self.settings.outage_limit_s:
                    raise KafkaUnavailable(f"{e}; the watch retried for {self.settings.outage_limit_s:g} s"
                                           " (--outage-limit) and stops") from e  # fmt: skip
                self._say(f"batch {cfg.run_id} failed ({first_line(e)[:160]}); again in {wait:g} s")
                self._stop.wait(wait)
                wait = min(wait * 2, RETRY_MAX_S)
                work = self._rechosen(files, delivered)
                continue
            finally:
                self._batch = None
            self._ended(result, delivered, files)
            return

    def _backlog(self, now_ms: int) -> None:
        """The files seen and not yet sent, into the metrics and the status line."""
        waiting = self._waiting
        oldest = max((now_ms - self._landed_ms.get(f.path, now_ms)) / 1000 for f in waiting) if waiting else 0.0
        self.metrics.backlog(len(waiting), sum(f.size for f in waiting), oldest)
        self._status()

    def _rechosen(self, files: list[Landed], delivered: Delivered) -> Work:
        """The batch's files as the ledger now has them (a failed attempt may have committed some units)."""
        return self._work([delivered.standing(f).file for f in files], delivered, None, None)

    def _work(self, files: list[InputFile], delivered: Delivered, max_files: int | None, max_bytes: int | None) -> Work:
        """What of ``files`` a batch sends (their units the ledger lacks), read on from the ledger's end as last read."""
        backlog = incremental.classify(files, delivered.entries([f.path for f in files]), self.cfg.topic)
        selection = incremental.select(backlog, "resend", max_files, max_bytes)
        return Work(selection=replace(selection, ledger_end=dict(delivered.position or {0: 0})))

    def _ended(self, result: BatchResult, delivered: Delivered, files: list[Landed]) -> None:
        """The batch's commits read from the ledger; each file now wholly in the topic counted,
        its latency observed, and cleaned up."""
        try:
            delivered.catch_up()
        except KafkaUnavailable:
            if result.status == "succeeded":
                raise
        now_ms = time.time_ns() // 1_000_000
        rows: list[dict[str, Any]] = []
        for f in files:
            if delivered.standing(f).state != "sent":
                continue
            landed_ms = self._landed_ms.pop(f.path, now_ms)
            latency = (now_ms - landed_ms) / 1000
            result.latency_s[f.path] = latency
            self.metrics.file_sent(delivered.rows_of(f.path), latency)
            self.summary.files_sent += 1
            rows.append({"watch_id": self.cfg.run_id, "run_id": result.run_id, "file": f.path, "bytes": f.size,
                         "rows": delivered.rows_of(f.path), "landed_at": _utc(landed_ms), "committed_at": _utc(now_ms),
                         "latency_s": latency})  # fmt: skip
            self._dispose(f, delivered)
        self._waiting = [f for f in self._waiting if f.path not in result.latency_s]
        self._backlog(now_ms)
        if rows:  # after the batch's own rows (the same recorder, in order)
            self._recorder().submit(store.append, self.cfg.metrics, {"watch_files": rows})
        self.summary.rows_sent += result.rows_sent
        self.summary.batches.append(result)
        self.metrics.batch_ended(result.status)
        sent = len(result.latency_s)
        worst = f", latency up to {max(result.latency_s.values()):.1f} s" if sent else ""
        why = f": {first_line(result.error)[:200]}" if result.error else ""
        self._say(f"batch {result.run_id}: {result.status}, {sent}/{len(files)} file(s), "
                  f"{result.rows_sent:,} rows in {result.wall_s:.1f} s{worst}{why}")  # fmt: skip

    def _batch_cfg(self, number: int, attempt: int, files: list[Landed]) -> IngestConfig:
        run_id = f"{self.cfg.run_id}-b{number:05d}" + (f"-{attempt}" if attempt > 1 else "")
        return replace(self.cfg, run_id=run_id, lineage=run_id, inputs=tuple(f.path for f in files), incremental=True,
                       on_changed="resend", max_files=None, max_bytes=None, watch_id=self.cfg.run_id)  # fmt: skip

    def _recorder(self) -> Recorder:
        assert self.resources.recorder is not None, "batches run while the watch records"
        return self.resources.recorder

    # -- what becomes of a file -------------------------------------------------------------
    def _dispose(self, f: Landed, delivered: Delivered) -> None:
        try:
            if disposal.after_send(f, self.settings.after_send) is not None:
                delivered.forget(f)  # gone from the landing: its identity alone kept
        except OSError as e:  # tried again when the landing next changes, and at the next start
            self._say(f"warning: --after-send {self.settings.after_send} of {f.path}: {e}")

    def _dispose_sent(self, delivered: Delivered, found: list[Landed]) -> None:
        """At the start: what was sent and is still there cleaned up (a crash between a
        commit and its clean-up)."""
        if self.settings.after_send == "keep":
            return
        for f in found:
            if delivered.standing(f).state == "sent":
                self._dispose(f, delivered)

    def _refuse(self, f: Landed, reason: str, message: str) -> None:
        """A file not sent: told once (a line, the metrics, a dead-letter event), and the watch goes on."""
        self._refused[f.path] = f.identity()
        self.summary.refused[f.path] = message
        self.metrics.file_failed(reason)
        self._say(f"refused: {message}")
        self._dead_letter(f, reason, message)

    def _unsendable(self, f: Landed, message: str) -> None:
        if self.settings.halt_on_error:
            raise InputError(f"{message} (--halt-on-error: the watch stops)")
        self._refuse(f, "unsendable", message)
        if self.settings.error_dir:
            where = disposal.to_error_dir(f, message, self.settings.error_dir)
            self._say(f"moved to {where}")

    def _dead_letter(self, f: Landed, reason: str, message: str) -> None:
        if not self.cfg.dead_letter_topic:
            return
        import json

        from confluent_kafka import Producer

        conf = connection_conf(self.cfg.producer_settings(), self.resources.servers())
        producer = Producer({**conf, "acks": "all"})
        event = {"event": reason, "file": f.path, "size": f.size, "mtime_ms": f.mtime_ms, "version": f.version,
                 "watch": self.cfg.run_id, "error": message}  # fmt: skip
        producer.produce(self.cfg.dead_letter_topic, json.dumps(event).encode(), f.path.encode(),
                         headers=[("kappa_event", reason.encode()), ("source_file", f.path.encode())])  # fmt: skip
        if producer.flush(10):
            self._say(f"warning: the dead-letter event for {f.path} was not acknowledged")

    def _say(self, line: str) -> None:
        if self.echo:
            if self._live:
                sys.stdout.write("\r\x1b[K")  # the status line gives way, and comes back below
            print(line, file=sys.stderr if line.startswith("warning") else sys.stdout, flush=True)
            self._status()

    def _status(self) -> None:
        """On a terminal, one line kept up to date: what was sent, what waits, how long."""
        if not self._live:
            return
        m, s = self.metrics, self.summary
        waiting, oldest = int(m.files_waiting._value.get()), m.oldest_waiting._value.get()
        sys.stdout.write(f"\r\x1b[K{s.files_sent:,} file(s), {s.rows_sent:,} rows sent; {waiting} waiting"
                         + (f" (oldest {oldest:.1f} s)" if waiting else "") + f"; {len(s.refused)} refused")  # fmt: skip
        sys.stdout.flush()


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _named_file(e: KappaError, files: list[Landed]) -> Landed | None:
    """The batch's file an input error is about (every such error begins ``input PATH:``)."""
    text = str(e)
    return next((f for f in files if f"input {f.path}:" in text), None)


def _what_changed(before: Any, now: tuple[int, int, str]) -> str:
    if before is None:
        return "size or time"
    names = ("size", "modification time", "ETag")
    return ", ".join(f"{n} {a} -> {b}" for n, a, b in zip(names, before, now, strict=True) if a != b) or "version"
