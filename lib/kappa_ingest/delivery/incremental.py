"""``--incremental``: a scheduled run over a landing directory sends only what the ledger
does not show delivered to its topic.

A file's ledger entries (of the file as it is now: same size and modification time) say
which of its units are in the topic. A file they cover is skipped without being read; a
file with some units delivered (a run that failed half-way) is read with the split size
and parts of those entries, and only its missing units are sent; a new file is sent
whole. A file delivered before that has since changed is refused (exit 3, naming it) or,
with ``--on-changed resend``, sent whole again as a new version.

Every incremental run cuts a new file into the same units (``INCREMENTAL_SPLIT_BYTES``,
no shuffle but by key), whatever else it reads: two scheduled runs over one file write its
units under the same transactional ids, and so never both commit one
(:mod:`kappa_ingest.delivery.guarantees`). A run that completes half-delivered files split otherwise
(by a plain run, or an earlier version) sends only those, and new files in the next run. ``--max-files`` and
``--max-bytes`` bound one run, oldest files first (half-delivered ones before them): a
backlog drains over several runs, and the report says what is left.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kappa_ingest.delivery import ledger
from kappa_ingest.delivery.guarantees import counts_as_delivered
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.s3.access import is_s3
from kappa_ingest.source import opening
from kappa_ingest.source.inputs import resolve_inputs
from kappa_ingest.source.splits import (
    BY_ROWS,
    INCREMENTAL_SPLIT_BYTES,
    InputFile,
    Plan,
    Unit,
    changed_what,
    local_file,
    object_file,
)


@dataclass(frozen=True)
class Backlog:
    """Where each input file stands against the ledger."""

    new: list[InputFile] = field(default_factory=list)
    partial: list[tuple[InputFile, Plan]] = field(default_factory=list)  # with the plan its entries were made by
    delivered: dict[Unit, Entry] = field(default_factory=dict)  # units of partial files already in the topic
    done: list[InputFile] = field(default_factory=list)
    changed: list[tuple[InputFile, Entry]] = field(default_factory=list)  # with one entry of the old version


def classify(files: list[InputFile], entries: list[Entry], topic: str) -> Backlog:
    """Sort ``files`` (oldest first) by what the ledger's ``entries`` show delivered to ``topic``."""
    by_file: dict[str, list[Entry]] = {}
    for (t, unit), e in ledger.latest(entries).items():
        if t == topic:
            by_file.setdefault(unit.file, []).append(e)
    out = Backlog()
    for f in sorted(files, key=lambda f: (f.mtime_ms, f.path)):
        mine = by_file.get(f.path, [])
        current = [e for e in mine if counts_as_delivered(e, f.size, f.mtime_ms, None, f.version)]
        if not current and mine:
            out.changed.append((f, mine[0]))
            continue
        if not current:
            out.new.append(f)
            continue
        plan = _plan_of(f, current)
        units = set(plan.units())
        got = {e.unit: e for e in current if e.unit in units}
        if len(got) == len(units):
            out.done.append(f)
        else:
            out.partial.append((f, plan))
            out.delivered.update(got)
    return out


def _plan_of(f: InputFile, entries: list[Entry]) -> Plan:
    """The split size and parts the entries of one file were delivered with (entries of
    runs before the split size was recorded: the longest unit's length)."""
    split = max(e.split_bytes for e in entries) or max(e.unit.length for e in entries)
    parts = entries[0].unit.parts
    # Entries from before the line path shuffled do not say: parts were Spark's parsed rows'.
    by = entries[0].parts_by or (BY_ROWS if parts > 1 else "")
    return Plan((f,), max(split, 1), parts, by)


@dataclass(frozen=True)
class Selection:
    """What one incremental run reads: ``plan`` when half-delivered files pin the split
    size (else the run plans its own), ``paths`` to read, units to skip, and what is left."""

    paths: list[str]
    plan: Plan | None
    delivered: dict[Unit, Entry]
    summary: dict[str, Any]
    ledger_end: dict[int, int] = field(default_factory=dict)  # where the reading of the ledger ended

    @property
    def nothing_left(self) -> bool:
        return not self.paths


def _as_delivered(f: InputFile, e: Entry) -> InputFile:
    """The file as the ledger's entry saw it when it was delivered."""
    return InputFile(f.path, e.file_size, e.file_mtime_ms, f.splittable, e.file_version)


def select(backlog: Backlog, on_changed: str, max_files: int | None, max_bytes: int | None) -> Selection:
    """Choose this run's files: half-delivered first, then new and changed ones, oldest first,
    within the bounds (the first file is always taken, so one larger than ``max_bytes``
    cannot stall the backlog)."""
    if backlog.changed and on_changed != "resend":
        names = "; ".join(f"{f.path} ({changed_what(_as_delivered(f, e), f)})" for f, e in backlog.changed[:3])
        raise InputError(
            f"--incremental: {len(backlog.changed)} file(s) changed since they were delivered: {names};"
            " give --on-changed resend to send them again as a new version, or restore them"
        )
    pinned: Plan | None = None
    queue: list[InputFile] = []
    deferred: list[InputFile] = []
    for f, plan in backlog.partial:
        pinned = pinned or plan
        if (plan.split_bytes, plan.parts, plan.parts_by) == (pinned.split_bytes, pinned.parts, pinned.parts_by):
            queue.append(f)
        else:  # split differently by another run: its turn comes in a later run
            deferred.append(f)
    fresh = sorted([*backlog.new, *(f for f, _ in backlog.changed)], key=lambda f: (f.mtime_ms, f.path))
    if pinned is not None and pinned.split_bytes != INCREMENTAL_SPLIT_BYTES:
        deferred += fresh  # read with the pinned split size they would be cut unlike any other run's
    else:
        queue += fresh
    taken: list[InputFile] = []
    total, stopped = 0, False
    for f in queue:
        stopped = stopped or (
            bool(taken)
            and ((max_files is not None and len(taken) >= max_files)
                 or (max_bytes is not None and total + f.size > max_bytes))
        )  # fmt: skip
        if stopped:  # this file and every later one: the backlog drains in order
            deferred.append(f)
            continue
        taken.append(f)
        total += f.size
    plan = None
    if pinned is not None:
        plan = Plan(tuple(taken), pinned.split_bytes, pinned.parts, pinned.parts_by)
    new = {f.path for f in backlog.new}
    partial = {f.path for f, _ in backlog.partial}
    changed = {f.path for f, _ in backlog.changed}
    summary = {
        "files_delivered_before": len(backlog.done),
        "files_new": sum(1 for f in taken if f.path in new),
        "files_completed": sum(1 for f in taken if f.path in partial),
        "files_changed_resent": [f.path for f in taken if f.path in changed],
        "files_left": len(deferred),
        "bytes_left": sum(f.size for f in deferred),
        "bytes_selected": total,
    }
    return Selection([f.path for f in taken], plan, backlog.delivered if plan is not None else {}, summary)


def prepare(cfg: Any, conf: dict[str, Any]) -> Selection:
    """Read the ledger and choose what an incremental run of ``cfg`` sends."""
    opening.for_run(cfg.s3_endpoint)
    paths, _ = resolve_inputs(cfg.inputs)
    remote = [p for p in paths if "://" in p and not is_s3(p)]
    if remote:
        raise UsageError(f"--incremental: local files and objects only ({remote[0]}); list other inputs explicitly")
    files = [object_file(p, cfg.multiline) if is_s3(p) else local_file(p, cfg.multiline) for p in paths]
    entries, ledger_end = ledger.snapshot(conf, cfg.ledger_topic)
    selection = select(classify(files, entries, cfg.topic), cfg.on_changed, cfg.max_files, cfg.max_bytes)
    return replace(selection, ledger_end=ledger_end)
