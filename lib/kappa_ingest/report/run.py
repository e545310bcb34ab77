"""The run report of contract §3: built from Spark's task and stage records joined with
the producers' own counts, checked for its invariants, printed and written as
``<metrics-dir>/runs/<run_id>/summary.json``."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kappa_ingest.report.phases import LABELS, RunClock, iso
from kappa_ingest.s3.directory import Directory, MetricsDir

if TYPE_CHECKING:  # the command line imports this before Spark starts: keep it light
    from kappa_ingest.delivery.ledger import Entry
    from kappa_ingest.delivery.reconcile import Verdict
    from kappa_ingest.sinks.task_stats import TaskStats
    from kappa_ingest.source.dataframe import Header
    from kappa_ingest.spark.metrics import SparkRunMetrics, TaskInfo

MB = 1_000_000


def _rate(n: float, seconds: float | None) -> float:
    return round(n / seconds, 1) if seconds else 0.0


@dataclass
class RunReport:
    """Everything one run reports; ``summary()`` is the JSON document."""

    run_id: str
    sink: str
    topic: str
    config: dict[str, Any]
    clock: RunClock = field(default_factory=RunClock)
    status: str = "running"
    error: str | None = None
    bootstrap_servers: str | None = None
    spark_master: str | None = None
    finished_at: datetime | None = None
    dry_run: bool = False
    read_path: str | None = None
    counted_by: str | None = None
    rows_read: int = 0
    rows_sent: int = 0
    rows_quarantined: int = 0
    rows_converted: int = 0
    bytes_sent: int = 0
    ingest_s: float | None = None
    executors: list[dict[str, Any]] = field(default_factory=list)
    stages: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    broker_rate: list[dict[str, Any]] = field(default_factory=list)
    broker: dict[str, Any] = field(default_factory=dict)
    quarantine: dict[str, Any] = field(default_factory=dict)
    duplicates: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    delivery: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    ledger: dict[str, Any] = field(default_factory=dict)
    incremental: dict[str, Any] | None = None  # what an --incremental run chose, and what it left
    dead_letter: dict[str, Any] | None = None  # {topic, rows, found} with --dead-letter-topic
    headers: list[dict[str, Any]] = field(default_factory=list)  # [{columns, files, rows}] per distinct header
    quality: dict[str, Any] | None = None  # the --expectations suite's verdict
    reprocess: dict[str, Any] | None = None  # a replay: what of which topic, and both topics compared
    rows_inherited: int = 0  # rows_sent by attempts Spark counted as failed after they committed

    @property
    def started_at(self) -> datetime:
        return self.clock.started_at

    @property
    def wall_s(self) -> float:
        end = self.finished_at or datetime.now(UTC)
        return round((end - self.started_at).total_seconds(), 3)

    @property
    def phases(self) -> dict[str, float]:
        end = self.finished_at or datetime.now(UTC)
        return self.clock.phases(end.timestamp())

    # Long: the join of the producers' counts with Spark's records, and its checks, in one place.
    def add_run(
        self,
        stats: list[TaskStats],
        spark: SparkRunMetrics,
        inherited: list[Entry] | None = None,
        per_task: bool = False,
    ) -> None:
        """Join the producers' per-task counts with Spark's task and stage records.

        ``inherited``: ledger entries of units that attempts Spark counted as failed had
        committed before they died; their rows are in the topic, sent by this run.
        ``per_task``: a task's transaction holds all its units (shuffled input), not one."""
        inherited = inherited or []
        by_task = {s.task_id: s for s in stats}
        # Every attempt of the stages that sent: a stage run again (its shuffle input lost)
        # has attempts of which no task succeeded.
        sending = {t.stage_id for t in spark.tasks if t.task_id in by_task}
        send_tasks = [t for t in spark.tasks if t.stage_id in sending]
        self.rows_inherited = sum(e.rows_sent for e in inherited)
        self.rows_read = sum(s.rows_read for s in stats) + sum(e.rows_read for e in inherited)
        self.rows_converted = sum(s.rows_sent for s in stats) + self.rows_inherited
        self.rows_quarantined = sum(s.rows_quarantined for s in stats) + sum(e.rows_quarantined for e in inherited)
        if not self.dry_run:
            self.rows_sent = self.rows_converted
            self.bytes_sent = sum(s.bytes_sent for s in stats) + sum(e.bytes_sent for e in inherited)
        # Every line or row read, counted apart from the parsers: by Spark's input metrics,
        # or where tasks read their splits themselves, by their readers.
        lines = sum(s.rows_read + s.lines_skipped + s.lines_dropped for s in stats)
        spark_records = sum(t.records_read for t in spark.tasks if t.status == "SUCCESS")
        if stats and all(s.lines_read >= 0 for s in stats):
            read = sum(s.lines_read for s in stats)
            self.check("lines the tasks read = rows read + header/blank lines + lines of units delivered before",
                       read == lines, lines, read)  # fmt: skip
        elif any(t.stage_attempt for t in spark.tasks):  # a stage run again (lost shuffle output) read input again
            self.check("Spark's input records >= rows read + header/blank lines + lines of units delivered before"
                       " (a stage ran again)", spark_records >= lines, f">= {lines}", spark_records)  # fmt: skip
        else:
            self.check("Spark's input records = rows read + header/blank lines + lines of units delivered before",
                       spark_records == lines, lines, spark_records)  # fmt: skip
        if send_tasks:
            # From the sending job's first task: lines shuffled before they are parsed (an
            # ordered replay) are read and moved by a stage of their own, part of sending.
            job = spark.same_jobs(sending)
            start = min(t.launched_at for t in spark.tasks if t.stage_id in job)
            end = max(t.ended_at for t in send_tasks)
            self.ingest_s = round((end - start).total_seconds(), 3)
        self.tasks = [self._task(t, by_task.get(t.task_id)) for t in sorted(send_tasks, key=lambda t: t.task_id)]
        self.executors = self._executors(send_tasks, by_task, spark)
        self.stages = [
            {
                "stage_id": s.stage_id,
                "attempt": s.attempt,
                "name": s.name,
                "status": s.status,
                "num_tasks": s.num_tasks,
                "submitted_at": iso(s.submitted_at),
                "completed_at": iso(s.completed_at),
                "duration_s": s.duration_s,
                "executor_run_s": round(s.executor_run_s, 3),
                "executor_cpu_s": round(s.executor_cpu_s, 3),
                "input_bytes": s.input_bytes,
                "input_records": s.input_records,
                "sends": s.stage_id in sending,
            }
            for s in spark.stages
        ]
        failed = [t for t in send_tasks if t.status != "SUCCESS"]
        self.duplicates = {
            "failed_attempts": [{"task_id": t.task_id, "partition": t.partition, "error": t.error} for t in failed],
            "count": 0,
            "by_file": {},
        }
        # Units attempts Spark counted as failed had committed (in a failed run: before it
        # failed) are transactions this run committed too: one per unit, or over shuffled
        # input one per attempt (:func:`pipeline.accounting.inherited`).
        eos = self.delivery.get("mode") == "exactly-once"
        by_failed = len({(e.task_id, e.attempt) if per_task else e.unit for e in inherited}) if eos else 0
        self.delivery["transactions_committed"] = sum(s.transactions for s in stats) + by_failed
        self.delivery["commit_retries"] = sum(s.commit_retries for s in stats)
        self.delivery["init_retries"] = sum(s.init_retries for s in stats)
        self.delivery["retry_wait_s"] = round(sum(s.retry_wait_ms for s in stats) / 1000, 3)
        # Time the tasks spent in transaction calls (init, which fences, and commit): what
        # exactly-once adds to their work, beside the ledger's few records.
        self.delivery["transaction_s"] = round(sum(s.transaction_ms for s in stats) / 1000, 3)
        # Rows converted while their unit's first round trips ran (sinks/early.py): time hidden.
        self.delivery["rows_converted_early"] = sum(s.rows_early for s in stats)
        # A failed attempt's transaction is aborted, by the attempt or, fenced, by the next one.
        self.delivery["transactions_aborted"] = len(failed) + sum(s.aborted for s in stats) if eos else 0
        if inherited:
            self.delivery["committed_by_failed_attempts"] = {"units": len(inherited), "rows": self.rows_inherited}

    def add_headers(self, headers: Sequence[Header], stats: list[TaskStats], inherited: list[Entry]) -> None:
        """Each distinct header of the files read, with its files and the rows read from them."""
        by_file: Counter[str] = Counter()
        for e in [*(e for s in stats for e in s.entries()), *inherited]:
            by_file[e.unit.file] += e.rows_read
        self.headers = [{**h.to_json(), "rows": sum(by_file[f] for f in h.files)} for h in headers]
        if headers:
            counted = sum(h["rows"] for h in self.headers)
            self.check("rows by header = rows read", counted == self.rows_read, self.rows_read, counted)

    def add_quality_counts(self, stats: list[TaskStats]) -> None:
        """Rows the tasks found failing each row-level expectation, beside GX's own count."""
        counted: Counter[str] = Counter()
        for s in stats:
            counted.update(json.loads(s.failed))
        assert self.quality is not None
        for r in self.quality["expectations"]:
            if r["quarantines"]:
                r["rows_quarantined_for"] = counted[str(r["index"])]
                self.check(f"rows failing {r['label']}: kappa-ingest's count = Great Expectations' unexpected_count",
                           counted[str(r["index"])] == r["unexpected_count"], r["unexpected_count"],
                           counted[str(r["index"])])  # fmt: skip

    def _task(self, t: TaskInfo, s: TaskStats | None) -> dict[str, Any]:
        rows = s.rows_sent if s else 0
        return {
            "task_id": t.task_id,
            "stage_id": t.stage_id,
            "partition": t.partition,
            "attempt": t.attempt,
            "stage_attempt": t.stage_attempt,
            "status": t.status,
            "executor_id": t.executor_id,
            "host": t.host,
            "launched_at": iso(t.launched_at),
            "duration_s": t.duration_s,
            "rows": rows,
            "bytes": s.bytes_sent if s else 0,
            "rows_quarantined": s.rows_quarantined if s else 0,
            "rows_per_s": _rate(rows, t.duration_s),
            "transaction_s": round(s.transaction_ms / 1000, 3) if s else 0.0,
        }

    def _executors(
        self, tasks: list[TaskInfo], by_task: dict[int, TaskStats], spark: SparkRunMetrics
    ) -> list[dict[str, Any]]:
        groups: dict[str, list[TaskInfo]] = defaultdict(list)
        for t in tasks:
            groups[t.executor_id].append(t)
        out = []
        for eid, ts in sorted(groups.items()):
            stats = [by_task[t.task_id] for t in ts if t.task_id in by_task]
            rows = sum(s.rows_sent for s in stats)
            nbytes = sum(s.bytes_sent for s in stats)
            busy = sum(t.duration_s for t in ts)
            span = (max(t.ended_at for t in ts) - min(t.launched_at for t in ts)).total_seconds()
            host = spark.executors[eid].host if eid in spark.executors else ts[0].host
            cores = spark.executors[eid].cores if eid in spark.executors else 0
            notes = list(dict.fromkeys(n for s in stats for n in json.loads(s.notes)))
            out.append(
                {
                    "executor_id": eid,
                    "host": host,
                    "cores": cores,  # 0: Spark did not say
                    "tasks": len(ts),
                    "rows": rows,
                    "bytes": nbytes,
                    "busy_s": round(busy, 3),
                    "span_s": round(span, 3),
                    # An executor's rate is over its span: its tasks run concurrently on its cores.
                    "rows_per_s": _rate(rows, span),
                    "mb_per_s": round(nbytes / MB / span, 3) if span else 0.0,
                    # C, Python, or both if the executor's Python workers differed
                    "record_loops": "/".join(sorted({s.record_loops for s in stats if s.record_loops})),
                    "warnings": notes,
                }
            )
        return out

    def add_offsets(self, before: dict[int, int], after: dict[int, int]) -> int:
        """The topic's high watermarks before and after; returns how far they moved."""
        delta = sum(after.values()) - sum(before.get(p, 0) for p in after)
        self.broker.update(offsets_before=sum(before.values()), offsets_after=sum(after.values()), offset_delta=delta,
                           offsets_before_by_partition=before, offsets_after_by_partition=after)  # fmt: skip
        return delta

    def add_verdict(self, verdict: Verdict) -> None:
        """The broker's account of the run (:func:`kappa_ingest.delivery.reconcile.check`)."""
        for name, ok, expected, actual in verdict.checks:
            self.check(name, ok, expected, actual)
        self.delivery["verified_by"] = verdict.verified_by
        self.duplicates["count"] = verdict.duplicates
        self.duplicates["by_file"] = verdict.duplicates_by_file

    def check(self, name: str, ok: bool, expected: Any, actual: Any) -> None:
        self.checks.append({"name": name, "ok": bool(ok), "expected": expected, "actual": actual})

    def check_counts(self) -> None:
        """The invariants the job checks itself (contract §3)."""
        counted = self.rows_converted + self.rows_quarantined
        name = (
            "rows_read = rows_converted + rows_quarantined"
            if self.dry_run
            else "rows_read = rows_sent + rows_quarantined"
        )
        self.check(name, self.rows_read == counted, counted, self.rows_read)
        exec_rows = sum(e["rows"] for e in self.executors) + self.rows_inherited
        name = "executors' rows add up to rows_sent"
        if self.rows_inherited:
            name = "executors' rows + rows committed by failed attempts add up to rows_sent"
        self.check(name, exec_rows == self.rows_converted, self.rows_converted, exec_rows)

    @property
    def consistent(self) -> bool:
        return all(c["ok"] for c in self.checks)

    def summary(self) -> dict[str, Any]:
        """The report as summary.json holds it, secrets masked (the Delta tables, the HTML page
        and what the run prints are all made from it)."""
        from kappa_ingest.kafka.credentials import mask_tree

        return mask_tree(self._summary())

    def _summary(self) -> dict[str, Any]:
        mb = self.bytes_sent / MB
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "sink": self.sink,
            "topic": self.topic,
            "bootstrap_servers": self.config.get("bootstrap_servers") or self.bootstrap_servers,
            "spark_master": self.spark_master,
            "dry_run": self.dry_run,
            "read_path": self.read_path,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "wall_s": self.wall_s,
            "phases": self.phases,
            "ingest_s": self.ingest_s,
            "rows_read": self.rows_read,
            "rows_sent": self.rows_sent,
            "rows_quarantined": self.rows_quarantined,
            "rows_converted": self.rows_converted,
            "bytes_sent": self.bytes_sent,
            "rows_per_s": _rate(self.rows_sent, self.ingest_s),
            "mb_per_s": round(mb / self.ingest_s, 3) if self.ingest_s else 0.0,
            "counted_by": self.counted_by,
            "executors": self.executors,
            "stages": self.stages,
            "tasks": self.tasks,
            "broker_rate": self.broker_rate,
            "broker": self.broker,
            "quarantine": self.quarantine,
            "duplicates": self.duplicates,
            "delivery": self.delivery,
            "ledger": self.ledger,
            "incremental": self.incremental,
            "dead_letter": self.dead_letter,
            "headers": self.headers,
            "quality": self.quality,
            "reprocess": self.reprocess,
            "plan": self.plan,
            "checks": self.checks,
            "config": self.config,
        }

    def finish(self, metrics_dir: MetricsDir) -> str:
        """Stamp the end time and write ``summary.json``."""
        self.finished_at = datetime.now(UTC)
        return self.write(metrics_dir)

    def path(self, metrics_dir: MetricsDir) -> str:
        """Where ``summary.json`` is written."""
        return Directory.at(metrics_dir).join("runs", self.run_id, "summary.json")

    def write(self, metrics_dir: MetricsDir) -> str:
        text = json.dumps(self.summary(), indent=2, default=str) + "\n"
        return Directory.at(metrics_dir).write_text(text, "runs", self.run_id, "summary.json")


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False)))
        for r in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join("  " + line for line in lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:,.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return "-" if v is None else str(v)


def stage_label(stage: dict[str, Any], sink: str) -> str:
    """What a stage did, as people name it: the sending stage is "read, convert, send (sink)";
    another keeps Spark's call site, without the path (``collect at partition_runner.py:402``)."""
    if stage.get("sends"):
        return f"read, convert, send ({sink})"
    name = str(stage.get("name") or "")
    what, _, where = name.partition(" at ")
    return f"{what} at {where.rsplit('/', 1)[-1]}" if where else name


def one_minute_note(points: Sequence[dict[str, Any]]) -> str:
    """Kafka's one-minute rate at the end of a run, said to be warming up when the run was too
    short for it to mean the run's rate (1,881 msg/s after a 12 s run at 40,000)."""
    from kappa_ingest.report.broker_rate import WARM_S, seconds_sampled, warming_up

    seconds = round(seconds_sampled(points))
    value = f"Kafka's one-minute rate at end {points[-1]['one_minute_rate']:,.0f}" if points else ""
    if not points or not warming_up(seconds):
        return value
    return f"{value} (warming up: {seconds} s sampled of the {WARM_S} s it needs)"


def render_phases(phases: dict[str, float], wall_s: float) -> str:
    """``phases: start-up 4.1 s + set-up 1.9 s + sending 7.6 s + ... = 14.2 s wall``."""
    parts = " + ".join(f"{LABELS[k.removesuffix('_s')]} {v:.1f} s" for k, v in phases.items())
    return f"phases: {parts} = {wall_s:.1f} s wall (command start to report)"


def _render_delivery(s: dict[str, Any]) -> list[str]:
    d, ledger = s.get("delivery") or {}, s.get("ledger") or {}
    if not d.get("mode") or s["dry_run"]:
        return []
    line = f"  delivery {d['mode']}"
    if d["mode"] == "exactly-once":
        line += (
            f": {d.get('transactions_committed', 0)} transactions committed, {d.get('transactions_aborted', 0)}"
            f" aborted, {d.get('transaction_s', 0):.2f} s of task time in them"
        )
    if d.get("verified_by"):
        line += f"; verified by {d['verified_by']}"
    out = [line]
    if d.get("resumed_from"):
        out.append(
            f"  resumed from {d['resumed_from']}: {d.get('splits_skipped', 0):,} splits"
            f" ({d.get('rows_skipped', 0):,} rows) already delivered, skipped"
        )
    inc = s.get("incremental")
    if inc:
        changed = len(inc.get("files_changed_resent") or [])
        out.append(
            f"  incremental: {inc['files_new']:,} new files, {inc['files_completed']:,} completed, {changed:,} changed"
            f" and re-sent; {inc['files_delivered_before']:,} delivered before; {d.get('splits_skipped', 0):,}"
            f" splits ({d.get('rows_skipped', 0):,} rows) already in the topic"
        )
        if inc["files_left"]:
            out.append(f"  left for the next run: {inc['files_left']:,} files, {inc['bytes_left']:,} bytes"
                       " (--max-files / --max-bytes)")  # fmt: skip
    if ledger.get("missing") and s["status"] != "succeeded":
        committed = ledger.get("committed") or []
        out.append(f"  splits committed by this run ({len(committed)}): " + "; ".join(committed[:5])
                   + (" ..." if len(committed) > 5 else ""))  # fmt: skip
        out.append(f"  splits missing ({len(ledger['missing'])}): " + "; ".join(ledger["missing"][:5])
                   + (" ..." if len(ledger["missing"]) > 5 else "") + f"; complete them with --resume {s['run_id']}")  # fmt: skip
    return out


def _render_replay(r: dict[str, Any] | None) -> list[str]:
    if not r:
        return []
    gone = r["not_resent"]
    by = "all the ledger shows delivered" if r["selected_by"] == "everything" else f"by {r['selected_by']}"
    out = [f"  replay of {r['from_topic']} ({by}: runs {', '.join(r['runs'][:4])}"
           f"{' ...' if len(r['runs']) > 4 else ''}): {r['files']:,} files re-sent, {len(gone):,} not"
           + (f" ({sum(g['rows'] for g in gone):,} rows delivered before)" if gone else "")]  # fmt: skip
    out += [f"    not re-sent: {g['file']} ({g['rows']:,} rows): {g['reason']}" for g in gone[:10]]
    for side in (r.get("compare") or {}).values():
        parts = side["partitions"]
        counts = ", ".join(f"{p}: {v['records']:,}" for p, v in list(parts.items())[:8])
        out.append(f"    {side['topic']}: {side['records']:,} records in {len(parts)} partitions ({counts}),"
                   f" events {side['first_event']} .. {side['last_event']}")  # fmt: skip
    if r.get("retention_warning"):
        out.append(f"    warning: {r['retention_warning']}")
    return out


def _render_settings(config: dict[str, Any]) -> list[str]:
    """Where the run's settings came from: a job that found no conf/ingest.yaml says so."""
    if "config_file" not in config:
        return []
    sources = [f"those of run {config['resume']}"] if config.get("resume") else []
    sources += [config["config_file"]] if config["config_file"] else []
    if not sources:
        return ["  settings: command line only (no conf/ingest.yaml found: the producers run on Kafka's defaults"
                " + acks=all, idempotence)"]  # fmt: skip
    return [f"  settings: {' + '.join(sources)} + command line"]


# Long: the printed report top to bottom, as a user reads it.
def render(s: dict[str, Any]) -> str:
    """The report as people read it at the end of a run."""
    out = [
        f"kappa-ingest run {s['run_id']}: {s['status'].upper()}" + (" (dry run)" if s["dry_run"] else ""),
        f"  sink {s['sink']} -> topic {s['topic']} at {s['bootstrap_servers']}; Spark {s['spark_master']},"
        f" read path {s['read_path']}",
    ]
    out += _render_settings(s.get("config") or {})
    if s["error"]:
        out.append(f"  error: {s['error']}")
    out += [
        f"  rows read {s['rows_read']:,}  sent {s['rows_sent']:,}  quarantined {s['rows_quarantined']:,}"
        f"  bytes {s['bytes_sent']:,}",
        f"  ingest {_fmt(s['ingest_s'])} s of {_fmt(s['wall_s'])} s wall:"
        f"  {s['rows_per_s']:,.0f} rows/s  {s['mb_per_s']:.2f} MB/s",
        "  " + render_phases(s["phases"], s["wall_s"]),
    ]
    out += _render_delivery(s)
    headers = s.get("headers") or []
    if len(headers) > 1:
        out.append(f"  {len(headers)} distinct headers, each file's rows keyed by its own:")
        for h in headers:
            n = len(h["files"])
            out.append(f"    {','.join(h['columns'])[:70]}: {n:,} file{'s' if n != 1 else ''}, {h['rows']:,} rows")
    out += _render_replay(s.get("reprocess"))
    q = s.get("quality")
    if q:
        failed = [r for r in q["expectations"] if not r["success"]]
        verdict = "passed" if not failed else f"{len(failed)} of {len(q['expectations'])} failed"
        out.append(f"  quality: suite {q['suite']} ({len(q['expectations'])} expectations, gate {q['gate']}): {verdict},"
                   f" {q['seconds']:.1f} s; data docs {q['data_docs']}")  # fmt: skip
        out += [f"    {r['label']}: observed {r['observed']}" for r in failed]
    rate = s["broker"].get("rate")
    if rate:
        out.append(
            f"  broker side: peak {rate['peak_messages_per_s']:,.0f} msg/s, steady {rate['steady_messages_per_s']:,.0f}"
            f" msg/s, first record after {_fmt(rate['time_to_first_record_s'])} s; {one_minute_note(s['broker_rate'])}"
        )
    if s["broker"].get("retention_warning"):
        out.append(f"  warning: {s['broker']['retention_warning']}")
    if s["executors"]:
        out += ["", "executors"]
        out.append(
            _table(
                ["executor", "host", "tasks", "rows", "MB", "busy s", "span s", "rows/s", "MB/s", "loops"],
                [
                    [
                        e["executor_id"],
                        e["host"],
                        e["tasks"],
                        e["rows"],
                        e["bytes"] / MB,
                        e["busy_s"],
                        e["span_s"],
                        e["rows_per_s"],
                        e["mb_per_s"],
                        e.get("record_loops") or "-",
                    ]
                    for e in s["executors"]
                ],
            )
        )
        out += [f"  warning on executor {e['executor_id']}: {w}" for e in s["executors"] for w in e.get("warnings", [])]
    if s["stages"]:
        out += ["", "stages"]
        out.append(
            _table(
                ["stage", "tasks", "duration s", "run s", "jvm cpu s", "input MB", "input rows", "what"],
                [
                    [
                        f"{st['stage_id']}.{st['attempt']}",
                        st["num_tasks"],
                        st["duration_s"],
                        st["executor_run_s"],
                        st["executor_cpu_s"],
                        st["input_bytes"] / MB,
                        st["input_records"],
                        stage_label(st, s["sink"]),
                    ]
                    for st in s["stages"]
                ],
            )
        )
    if s["quarantine"].get("rows"):
        q = s["quarantine"]
        out += ["", f"quarantined {q['rows']:,} rows -> {q['path']}"]
        out += [f"  {n:,}  {reason}" for reason, n in q["reasons"].items()]
    if s.get("dead_letter"):
        dl = s["dead_letter"]
        out.append(f"dead letters: {dl['rows']:,} rows -> topic {dl['topic']} (read back: {dl['found']:,})")
    if s["duplicates"].get("count"):
        d = s["duplicates"]
        ids = ", ".join(str(t["task_id"]) for t in d["failed_attempts"])
        files = ", ".join(f"{f.rsplit('/', 1)[-1]} {n:,}" for f, n in (d.get("by_file") or {}).items())
        out.append(f"retry duplicates: {d['count']:,} records re-sent by retried tasks (failed attempts: {ids};"
                   f" by file: {files})")  # fmt: skip
    bad = [c for c in s["checks"] if not c["ok"]]
    for c in bad:
        out.append(f"CHECK FAILED: {c['name']}: expected {c['expected']}, got {c['actual']}")
    if s["checks"] and not bad:
        out.append(
            f"checks: {len(s['checks'])} of {len(s['checks'])} hold ({'; '.join(c['name'] for c in s['checks'])})"
        )
    return "\n".join(out)
