"""Rows converted while their unit waits on Kafka, so the task's first round trips cost it
no time: its producer's transactional id initialising (seven round trips, 0.75 s at 100 ms
of round trip), or the ledger being read.

The writer decides whether a unit is sent only once those round trips are done (the
ledger read after the id is initialised says whether it was delivered): until then the
unit's batches are parsed and converted and held, nothing counted and nothing sent. Once
the writer admits the unit, the held conversions are counted and sent as if they had been
made then; a unit found delivered (or taken over) drops them unseen. Only time depends on
converting early: what is sent and counted is what converting on admission gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from kappa_ingest.sinks.task_units import TaskInput
from kappa_ingest.source.parsing import Parsed
from kappa_ingest.source.records import Encoded
from kappa_ingest.source.splits import Unit

# The lines and records held at most: what a task converts in ~1 s, more than 100 ms of round
# trip asks (a wide30 batch of 9,200 lines: 2.7 MB of lines, 5.3 MB of records).
HELD_BYTES = 96 * 1024 * 1024

Convert = Callable[[Unit, pa.RecordBatch, int], tuple[Parsed, Encoded]]


@dataclass
class Early:
    """A batch's conversion made before its unit was admitted: its result, or the error it
    raised (raised where the conversion is taken, as converting then would have)."""

    result: tuple[Parsed, Encoded] | None = None
    error: Exception | None = None

    def taken(self) -> tuple[Parsed, Encoded]:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    @property
    def nbytes(self) -> int:
        return self.result[1].nbytes if self.result is not None else 0


def converted_early(
    batches: Iterator[pa.RecordBatch],
    task_input: TaskInput,
    waiting: Callable[[], bool],
    waits_for: Callable[[Unit], bool],
    convert: Convert,
    held_bytes: int = HELD_BYTES,
) -> Iterator[tuple[pa.RecordBatch, Early | None]]:
    """Each batch with its early conversion, or None. While the writer waits on Kafka for
    the unit a batch is all of (``waiting()``, then ``waits_for(unit)``), that batch and the
    unit's next ones are converted (``convert(unit, rows, lines of the unit held before)``)
    and held, until the wait is over or ``held_bytes`` of lines and records are held; then
    handed on."""
    it = iter(batches)
    pushed: pa.RecordBatch | None = None
    while True:
        batch = pushed if pushed is not None else next(it, None)
        pushed = None
        if batch is None:
            return
        unit = task_input.sole_unit(batch) if waiting() else None
        if unit is None or not waits_for(unit):
            yield batch, None
            continue
        held: list[tuple[pa.RecordBatch, Early]] = []
        lines = size = 0
        while batch is not None:
            early = _convert(convert, unit, batch, lines)
            held.append((batch, early))
            lines += batch.num_rows
            size += batch.nbytes + early.nbytes  # (a batch of rejects holds its lines all the same)
            if early.error is not None or size >= held_bytes or not waits_for(unit):
                break
            batch = next(it, None)
            if batch is not None and task_input.sole_unit(batch) != unit:
                pushed = batch
                break
        yield from held


def _convert(convert: Convert, unit: Unit, rows: pa.RecordBatch, lines_before: int) -> Early:
    try:
        return Early(result=convert(unit, rows, lines_before))
    except Exception as e:  # noqa: BLE001 - the unit's to raise, if it is admitted
        return Early(error=e)
