"""One task's input by unit, for its writer: units delivered before (or taken over by
another writer) dropped, and what the task did with each unit tallied for the ledger."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.source.parsing import Parsed
from kappa_ingest.source.records import Encoded
from kappa_ingest.source.splits import Unit, canonical_file
from kappa_ingest.source.task_input import segments

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
        self.mixed = mixes(parts, ordered)
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
            unit = self._unit(spark_file, start, length)
            if self._passed(unit):
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

    def sole_unit(self, batch: pa.RecordBatch) -> Unit | None:
        """The unit a batch is all of, where its rows are to be processed (None: rows of
        several units, or of one passed over)."""
        if self.mixed:
            return None
        found = list(segments(batch))
        if len(found) != 1:
            return None
        spark_file, start, length, _, _ = found[0]
        unit = self._unit(spark_file, start, length)
        return None if self._passed(unit) else unit

    def _unit(self, spark_file: str, start: int, length: int) -> Unit:
        name = self._names.get(spark_file)
        if name is None:
            name = self._names[spark_file] = canonical_file(spark_file)
        return Unit(name, start, length, self.part, self.parts)

    def _passed(self, unit: Unit) -> bool:
        """Whether ``unit``'s rows are passed over: delivered before, or found delivered or
        taken over since."""
        return unit in self.skip or unit in self.inherited or unit in self.dropped

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


def mixes(parts: int, ordered: bool) -> bool:
    """Whether a task's rows come from several splits interleaved (a shuffle's parts, an
    ordered replay's sort), rather than split after split."""
    return parts > 1 or ordered
