"""``--resume RUN_ID|last``: finish a run that stopped half-way, sending only what the
ledger does not show as delivered.

A resumed run is a run of its own (its own run id and report) that continues another:
it takes that run's settings and planned input (files, sizes, modification times, split
size) from its ``summary.json``, which every run writes before it sends anything, with
whatever the command line overrides; it refuses input files that changed since. Before
it reads the ledger, taking the topic's lock ends what the runs it continues left open
(Flink's KafkaSink aborts lingering transactions on recovery likewise:
:func:`kappa_ingest.delivery.end_lingering`), and a task of theirs still alive somewhere
shares its units' transactional ids with this run's (the same lineage): whichever of the
two initialises a unit later sees the other's commit or has fenced it. A unit is skipped
if the ledger shows it delivered to the topic, as the file is now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kappa_ingest import ledger
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.ledger import Entry
from kappa_ingest.splits import Plan, Unit

# Settings of the original run that a resumed run does not take over.
_OWN = {"run_id", "config_file", "resume", "quiet", "dry_run", "lineage"}  # lineage: config.validate finds it
MASKED = "***"


def _summaries(metrics_dir: str) -> list[dict[str, Any]]:
    runs = Path(metrics_dir) / "runs"
    out = []
    for path in sorted(runs.glob("*/summary.json")) if runs.is_dir() else []:
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a report being written, or damaged: not a run to resume
    return out


def find(metrics_dir: str, ref: str, topic: str | None = None) -> dict[str, Any]:
    """The report of run ``ref`` (or of the last run, for ``last``, on ``topic`` if given)."""
    if ref != "last":
        path = Path(metrics_dir) / "runs" / ref / "summary.json"
        if not path.exists():
            raise UsageError(
                f"--resume {ref}: no report of that run in {metrics_dir}/runs; give --metrics-dir of that run"
            )
        return json.loads(path.read_text())
    runs = [s for s in _summaries(metrics_dir) if not s.get("dry_run") and (topic is None or s.get("topic") == topic)]
    if not runs:
        where = f" on topic {topic}" if topic else ""
        raise UsageError(f"--resume last: no run{where} in {metrics_dir}/runs to resume")
    return max(runs, key=lambda s: s.get("started_at") or "")


def base_values(cli: dict[str, Any]) -> dict[str, Any]:
    """The settings a resumed run starts from: the original run's, its planned files as input."""
    metrics_dir = cli.get("metrics_dir") or "./metrics"
    s = find(metrics_dir, cli["resume"], cli.get("topic"))
    rid = s["run_id"]
    if s.get("dry_run"):
        raise UsageError(f"--resume {rid}: a dry run sends nothing to resume")
    if not s.get("plan"):
        raise UsageError(
            f"--resume {rid}: that run stopped before it planned its input, so it sent nothing; run it again"
        )
    config = s.get("config") or {}
    values = {k: v for k, v in config.items() if k not in _OWN and v is not None}
    values["inputs"] = [f["path"] for f in s["plan"]["files"]]
    values["resume"] = rid
    values["metrics_dir"] = metrics_dir
    if not config.get("bootstrap_servers"):
        if (s.get("broker") or {}).get("embedded"):
            raise UsageError(
                f"--resume {rid}: that run used an embedded broker, which stopped with it; nothing to resume into"
            )
        values["bootstrap_servers"] = s.get("bootstrap_servers")
    return values


def check_overrides(base: dict[str, Any], cli: dict[str, Any]) -> None:
    """What a resumed run's command line may not change, and secrets it must give again."""
    rid = base["resume"]
    if cli.get("topic") not in (None, base.get("topic")):
        raise UsageError(f"--resume {rid}: that run sent to topic {base.get('topic')!r}; a resumed run sends there too")
    if cli.get("inputs"):
        from kappa_ingest.inputs import resolve_inputs
        from kappa_ingest.splits import canonical_file

        given = {canonical_file(p) for p in resolve_inputs(tuple(cli["inputs"]))[0]}
        planned = set(base["inputs"])
        if given != planned:
            diff = sorted(given ^ planned)[:3]
            raise UsageError(f"--resume {rid}: --input names other files than that run read ({', '.join(diff)}, ...)")
    if cli.get("partitions") not in (None, base.get("partitions")):
        raise UsageError(f"--resume {rid}: that run used --partitions {base.get('partitions')}; keep it")
    opts = cli.get("kafka_opts") or base.get("kafka_opts") or {}
    masked = sorted(k for k, v in opts.items() if v == MASKED)
    if masked:
        raise UsageError(
            f"--resume {rid}: that run's {', '.join(masked)} is not kept in its report; give it again with --kafka-opt"
        )


@dataclass(frozen=True)
class Resumption:
    """What a resumed run knows before it reads anything."""

    resumed_from: str
    lineage: str
    plan: Plan
    delivered: dict[Unit, Entry]  # units of the plan the ledger shows delivered
    paths: list[str]  # files with at least one unit still to send
    ledger_end: dict[int, int] = field(default_factory=dict)  # where the reading of the ledger ended
    lineage_runs: frozenset[str] = frozenset()
    root_offsets_before: dict[int, int] = field(default_factory=dict)

    @property
    def skip(self) -> frozenset[Unit]:
        return frozenset(self.delivered)

    @property
    def rows_skipped(self) -> int:
        return sum(e.rows_sent for e in self.delivered.values())

    @property
    def nothing_left(self) -> bool:
        return not self.paths


def _changed(plan: Plan) -> list[str]:
    """Local input files whose size or modification time differ from the plan's."""
    out = []
    for f, now in plan.changed():
        if now is None:
            raise InputError(f"input {f.path}: no longer there; the run being resumed read it")
        size, mtime = now
        out.append(f"{f.path} (size {f.size:,} -> {size:,}, modified {f.mtime_ms} -> {mtime} ms)")
    return out


def prepare(cfg: Any, conf: dict[str, Any]) -> Resumption:
    """Check the resumed run's files and read the ledger (the topic's lock is held).

    ``cfg`` is the resumed run's IngestConfig, ``conf`` librdkafka settings for its Kafka.
    UsageError if an input file changed; KafkaUnavailable if Kafka cannot be read."""
    original = find(cfg.metrics_dir, cfg.resume)
    plan = Plan.from_json(original["plan"])
    changed = _changed(plan)
    if changed:
        raise UsageError(
            f"--resume {cfg.resume}: input changed since that run planned it: {'; '.join(changed[:3])};"
            " resuming would mix two versions of a file. Run it afresh instead"
        )
    runs = [s for s in _summaries(cfg.metrics_dir) if (s.get("config") or {}).get("lineage") == cfg.lineage]
    root = next((s for s in runs if s["run_id"] == cfg.lineage), original)
    entries, ledger_end = ledger.snapshot(conf, cfg.ledger_topic)
    latest = ledger.latest(entries)
    delivered: dict[Unit, Entry] = {}
    for unit in plan.units():
        entry = latest.get((cfg.topic, unit))
        f = plan.file(unit.file)
        if entry is not None and f is not None and entry.matches(f.size, f.mtime_ms):
            delivered[unit] = entry
    left = {u.file for u in plan.units() if u not in delivered}
    before = (root.get("broker") or {}).get("offsets_before_by_partition") or {}
    lineage_runs = {s["run_id"] for s in runs} | {e.run_id for e in latest.values() if e.lineage == cfg.lineage}
    return Resumption(
        resumed_from=original["run_id"],
        lineage=cfg.lineage,
        plan=plan,
        delivered=delivered,
        paths=[f.path for f in plan.files if f.path in left],
        ledger_end=ledger_end,
        lineage_runs=frozenset(lineage_runs | {cfg.run_id}),
        root_offsets_before={int(p): int(o) for p, o in before.items()},
    )
