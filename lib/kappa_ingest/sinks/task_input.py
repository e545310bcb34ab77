"""What a task reads, unit by unit: its Arrow batches cut where the split changes, units
already delivered (or taken over by another writer) dropped, and what it did with each
unit tallied for the ledger.

Spark hands a task the rows of its splits in order, so a batch is a few runs of rows,
each from one split (found from the ``_metadata`` columns the source adds). After a
shuffle (``parts`` > 1) rows arrive mixed: the batch is sorted by split first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kappa_ingest.columns import BLOCK_COL, BLOCK_LEN_COL, FILE_COL
from kappa_ingest.ledger import Entry
from kappa_ingest.parsing import BatchParser, Parsed
from kappa_ingest.records import Encoded
from kappa_ingest.splits import Unit, canonical_file


def segments(
    batch: pa.RecordBatch, mixed: bool = False
) -> Iterator[tuple[str, int, int, pa.RecordBatch, np.ndarray | None]]:
    """``(Spark's file path, split start, split length, rows, positions)`` for each run of
    rows of one split; ``positions``: where the rows were in the batch (mixed batches only,
    whose rows are sorted by split first, stably)."""
    n = batch.num_rows
    if n == 0:
        return
    order = None
    if mixed:
        order = np.asarray(pc.sort_indices(batch, [(FILE_COL, "ascending"), (BLOCK_COL, "ascending")]))
        batch = batch.take(pa.array(order))
    files = batch.column(FILE_COL).dictionary_encode()
    names = files.dictionary.to_pylist()
    codes = np.asarray(files.indices)
    starts = np.asarray(batch.column(BLOCK_COL))
    lengths = np.asarray(batch.column(BLOCK_LEN_COL))
    cuts = np.flatnonzero((codes[1:] != codes[:-1]) | (starts[1:] != starts[:-1])) + 1
    bounds = [0, *cuts.tolist(), n]
    for lo, hi in pairwise(bounds):
        at = order[lo:hi] if order is not None else None
        yield names[codes[lo]], int(starts[lo]), int(lengths[lo]), batch.slice(lo, hi - lo), at


def lines_of(handed: Iterator[pa.RecordBatch], parser: BatchParser, stats: Any = None) -> Iterator[pa.RecordBatch]:
    """What a task parses: the batches it was handed, or, handed its splits (a parser that
    ``reads_splits``), their lines, read here; ``stats.lines_read`` counts those lines, the
    report's account of every line read (Spark's input metrics, where Spark reads them)."""
    if not parser.reads_splits:
        yield from handed
        return
    from kappa_ingest import split_reader

    if stats is not None:
        stats.lines_read = 0
    for batch in split_reader.read(handed, encoding=parser.encoding):
        if stats is not None:
            stats.lines_read += batch.num_rows
        yield batch


def parsed_units(
    batches: Iterator[pa.RecordBatch], parser: BatchParser, parts: int, skip: frozenset[Unit], ordered: bool
) -> Iterator[Parsed]:
    """Inside a task: its rows parsed unit by unit as the sinks parse them, units in ``skip``
    left out (for passes beside the sending one: the quarantine, the quality gate)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None
    parse = parser.fresh()
    for _unit, rows in TaskInput(ctx.partitionId(), parts, skip, ordered=ordered).units(lines_of(batches, parser)):
        yield parse(rows)


DROP = object()  # what ``admit`` says of a unit another writer took over: its rows are dropped


@dataclass
class UnitTally:
    lines: int = 0
    rows_read: int = 0
    rows_sent: int = 0
    rows_quarantined: int = 0
    bytes_sent: int = 0


class TaskInput:
    """One task's input by unit. ``skip``: units delivered before this run; ``admit``: asked
    of each run of rows of a unit before they are processed, it returns the ledger entry of
    a unit found delivered meanwhile, or DROP for one another writer took over (either way
    its rows are dropped), else None."""

    def __init__(
        self,
        partition: int,
        parts: int = 1,
        skip: frozenset[Unit] = frozenset(),
        admit: Callable[[Unit], Entry | object | None] | None = None,
        ordered: bool = False,
    ) -> None:
        self.part = partition if parts > 1 else 0
        self.parts = parts
        self.ordered = ordered  # rows sorted by event time: processed unit by unit, sent in their order
        self.mixed = parts > 1 or ordered  # rows of several splits interleaved
        self.skip = skip
        self.admit = admit
        self.tallies: dict[Unit, UnitTally] = {}
        self.inherited: dict[Unit, Entry] = {}  # units found delivered by another attempt or writer
        self.dropped: set[Unit] = set()  # units taken over by another writer while this task sent them
        self.lines_dropped = 0
        self._names: dict[str, str] = {}

    def units(self, batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[Unit, pa.RecordBatch]]:
        """The rows to process, unit by unit; lines of units delivered before are counted, not yielded."""
        for batch in batches:
            for unit, rows, _ in self.units_at(batch):
                yield unit, rows

    def units_at(self, batch: pa.RecordBatch) -> Iterator[tuple[Unit, pa.RecordBatch, np.ndarray | None]]:
        """One batch's rows unit by unit, with where they were in the batch (mixed input)."""
        for spark_file, start, length, rows, at in segments(batch, mixed=self.mixed):
            name = self._names.get(spark_file)
            if name is None:
                name = self._names[spark_file] = canonical_file(spark_file)
            unit = Unit(name, start, length, self.part, self.parts)
            if unit in self.skip or unit in self.inherited or unit in self.dropped:
                self.lines_dropped += rows.num_rows
                continue
            found = self.admit(unit) if self.admit is not None else None
            if found is DROP:
                self.dropped.add(unit)
            elif isinstance(found, Entry):
                self.inherited[unit] = found
            if found is not None:
                self.lines_dropped += rows.num_rows
                continue
            yield unit, rows, at

    def drop(self, unit: Unit) -> UnitTally:
        """Forget what was sent of ``unit`` (another writer took it over: its transaction was
        aborted); its later rows are dropped. Returns its tally, to take off the task's counts."""
        self.dropped.add(unit)
        tally = self.tallies.pop(unit, UnitTally())
        self.lines_dropped += tally.lines
        return tally

    def position(self, unit: Unit) -> int:
        """Lines (or Spark's records) of ``unit`` processed so far."""
        t = self.tallies.get(unit)
        return t.lines if t is not None else 0

    def add(self, unit: Unit, lines: int, parsed: Parsed, enc: Encoded | None) -> None:
        t = self.tallies.setdefault(unit, UnitTally())
        t.lines += lines
        t.rows_read += parsed.rows_read
        t.rows_quarantined += parsed.rejects.num_rows
        if enc is not None:
            t.rows_sent += enc.rows
            t.bytes_sent += enc.nbytes
