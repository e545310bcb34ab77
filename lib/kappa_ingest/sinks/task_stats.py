"""What one task did (rows, bytes, transactions, the ledger entries of its units), joined
later with Spark's own task timings; gathered on the driver through an accumulator."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, fields
from typing import Any

import pyarrow.compute as pc
from pyspark import AccumulatorParam, TaskContext

from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.sinks import task_notes
from kappa_ingest.sinks.task_units import TaskInput
from kappa_ingest.source.parsing import Parsed
from kappa_ingest.source.records import Encoded, wall_clock_ms
from kappa_ingest.source.splits import Unit

NO_RECORDS_MS = 2**63 - 1  # a task's oldest timestamp before it sends a record


@dataclass
class TaskStats:
    """What one task did, joined later with Spark's own task timings by ``task_id``."""

    task_id: int
    stage_id: int
    partition: int
    attempt: int
    host: str
    rows_read: int = 0
    rows_sent: int = 0
    rows_quarantined: int = 0
    rows_early: int = 0  # of rows_sent, converted while their unit's producer opened (sinks/early.py)
    lines_skipped: int = 0  # headers and blank lines: read by Spark, not rows
    lines_dropped: int = 0  # lines of units delivered before (resumed run, earlier attempt)
    lines_read: int = -1  # lines the task read itself (kappa_ingest.source.split_reader); -1: Spark read them
    bytes_sent: int = 0
    oldest_ms: int = NO_RECORDS_MS  # the oldest timestamp its records carry (their event time, where given)
    started_ms: int = 0
    ended_ms: int = 0
    transactions: int = 0  # committed by this task
    aborted: int = 0  # transactions it aborted
    commit_retries: int = 0  # commit calls repeated after a retriable error
    init_retries: int = 0  # init_transactions calls repeated (a retriable error, or a new producer after a fatal one)
    retry_wait_ms: int = 0  # spent backing off before those retries
    markers: int = 0  # commit markers its transactions put in the topic's partitions; -1: unknown
    transaction_ms: int = 0  # spent initialising (fencing) and committing its transactions
    units: str = "[]"  # JSON: the ledger entries of the units it delivered
    inherited: str = "[]"  # JSON: entries of its units found delivered (by an earlier attempt, or another run)
    taken: str = "[]"  # JSON: units another writer took over and has not committed yet
    offsets: str = "[]"  # JSON: [[unit, ...], [[partition, first offset, count], ...]] per transaction (or producer)
    failed: str = "{}"  # JSON: rows failing each row-level expectation (--quality-gate quarantine)
    record_loops: str = ""  # C | Python: the record loops its process ran
    notes: str = "[]"  # JSON: warnings raised in its process (task_notes)

    @classmethod
    def current(cls) -> TaskStats:
        ctx = TaskContext.get()
        assert ctx is not None, "TaskStats.current() runs inside a Spark task"
        return cls(
            task_id=ctx.taskAttemptId(),
            stage_id=ctx.stageId(),
            partition=ctx.partitionId(),
            attempt=ctx.attemptNumber(),
            host=socket.gethostname(),
            started_ms=wall_clock_ms(),
        )

    def again(self) -> TaskStats:
        """Fresh statistics for the task's units sent again after a transaction its
        coordinator aborted: what it sent before counts no more (the units it committed are
        found in the ledger, as a retried attempt finds them); its start, and the time and
        transactions it spent on them, still do."""
        return TaskStats(self.task_id, self.stage_id, self.partition, self.attempt, self.host,
                         started_ms=self.started_ms, aborted=self.aborted, commit_retries=self.commit_retries,
                         init_retries=self.init_retries, retry_wait_ms=self.retry_wait_ms,
                         transaction_ms=self.transaction_ms)  # fmt: skip

    def add(self, parsed: Parsed, enc: Encoded) -> None:
        self.rows_read += parsed.rows_read
        self.rows_sent += enc.rows
        self.rows_quarantined += parsed.rejects.num_rows
        self.lines_skipped += parsed.skipped
        self.bytes_sent += enc.nbytes
        self.ended_ms = wall_clock_ms()
        if enc.rows:
            self.oldest_ms = min(self.oldest_ms, pc.min(enc.timestamps_ms).as_py())
        if parsed.failed:
            counts = json.loads(self.failed)
            for label, n in parsed.failed.items():
                counts[label] = counts.get(label, 0) + n
            self.failed = json.dumps(counts)

    def entries(self) -> list[Entry]:
        return [_entry(d) for d in json.loads(self.units)]

    def inherited_entries(self) -> list[Entry]:
        return [_entry(d) for d in json.loads(self.inherited)]

    def taken_units(self) -> list[Unit]:
        return [Unit(**d) for d in json.loads(self.taken)]

    def offset_runs(self) -> dict[tuple[Unit, ...], list[tuple[int, int, int]]]:
        """Where each of its transactions' records landed, by the units the transaction delivered."""
        return {tuple(Unit(**u) for u in units): [tuple(r) for r in runs] for units, runs in json.loads(self.offsets)}

    def finish(self, task_input: TaskInput, entries: list[Entry]) -> None:
        self.lines_dropped = task_input.lines_dropped
        self.units = json.dumps([asdict(e) for e in entries])
        self.inherited = json.dumps([asdict(e) for e in task_input.inherited.values()])
        self.record_loops, self.notes = task_notes.record_loops(), json.dumps(task_notes.taken())
        self.ended_ms = wall_clock_ms()


def _entry(d: dict[str, Any]) -> Entry:
    return Entry(**{**d, "unit": Unit(**d["unit"])})


_TEXT_FIELDS = {"host", "units", "inherited", "taken", "offsets", "failed", "record_loops", "notes"}
STATS_SCHEMA = ", ".join(f"{f.name} {'string' if f.name in _TEXT_FIELDS else 'bigint'}" for f in fields(TaskStats))


class TaskStatsParam(AccumulatorParam):
    """Per-task statistics by task attempt id: ``{task_id: TaskStats}`` (set once per task)."""

    def zero(self, value: dict[int, TaskStats]) -> dict[int, TaskStats]:
        return {}

    def addInPlace(self, a: dict[int, TaskStats], b: dict[int, TaskStats]) -> dict[int, TaskStats]:  # noqa: N802
        a.update(b)
        return a
