"""``--resume RUN_ID|last``: finish a run that stopped half-way, sending only what the
ledger does not show as delivered.

A resumed run is a run of its own (its own run id and report) that continues another:
it takes that run's settings and planned input (files, sizes, modification times, split
size) from its ``summary.json``, which every run writes before it sends anything, with
whatever the command line overrides; it refuses input files that changed since. Before
it reads the ledger, taking the topic's lock ends what the runs it continues left open
(Flink's KafkaSink aborts lingering transactions on recovery likewise:
:func:`kappa_ingest.delivery.guarantees.end_lingering`), and a task of theirs still alive somewhere
shares its units' transactional ids with this run's (the same lineage): whichever of the
two initialises a unit later sees the other's commit or has fenced it. A unit is skipped
if the ledger shows it delivered to the topic, as the file is now, by any run
(:func:`kappa_ingest.delivery.guarantees.counts_as_delivered` says why any run's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kappa_ingest.config.resumed import find, summaries
from kappa_ingest.delivery import ledger
from kappa_ingest.delivery.guarantees import counts_as_delivered
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.source.splits import Plan, Unit, changed_what


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
        out.append(f"{f.path} ({changed_what(f, now)})")
    return out


def prepare(cfg: Any, conf: dict[str, Any]) -> Resumption:
    """Check the resumed run's files and read the ledger (the topic's lock is held).

    ``cfg`` is the resumed run's IngestConfig, ``conf`` librdkafka settings for its Kafka.
    UsageError if an input file changed; KafkaUnavailable if Kafka cannot be read."""
    original = find(cfg.metrics, cfg.resume)
    plan = Plan.from_json(original["plan"])
    changed = _changed(plan)
    if changed:
        raise UsageError(
            f"--resume {cfg.resume}: input changed since that run planned it: {'; '.join(changed[:3])};"
            " resuming would mix two versions of a file. Run it afresh instead"
        )
    runs = [s for s in summaries(cfg.metrics) if (s.get("config") or {}).get("lineage") == cfg.lineage]
    root = next((s for s in runs if s["run_id"] == cfg.lineage), original)
    entries, ledger_end = ledger.snapshot(conf, cfg.ledger_topic)
    latest = ledger.latest(entries)
    delivered: dict[Unit, Entry] = {}
    for unit in plan.units():
        entry = latest.get((cfg.topic, unit))
        f = plan.file(unit.file)
        if entry is not None and f is not None and counts_as_delivered(entry, f.size, f.mtime_ms, None, f.version):
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
