"""What a task reads: its Arrow batches cut where the split changes, and its lines parsed
unit by unit (which units a writer sends is :mod:`kappa_ingest.sinks.task_units`'s).

Spark hands a task the rows of its splits in order, so a batch is a few runs of rows,
each from one split (found from the ``_metadata`` columns the source adds). After a
shuffle (``parts`` > 1) rows arrive mixed: the batch is grouped by split first.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa

from kappa_ingest.source.columns import BLOCK_COL, BLOCK_LEN_COL, FILE_COL
from kappa_ingest.source.parsing import BatchParser, Parsed
from kappa_ingest.source.splits import Unit, canonical_file


def segments(
    batch: pa.RecordBatch, mixed: bool = False
) -> Iterator[tuple[str, int, int, pa.RecordBatch, np.ndarray | None]]:
    """``(Spark's file path, split start, split length, rows, positions)`` for each run of
    rows of one split; ``positions``: where the rows were in the batch (mixed batches only,
    whose rows are grouped by split first, stably, where a split's rows are not already
    one run: an ordered replay of files in time order comes a run of each split at a time)."""
    n = batch.num_rows
    if n == 0:
        return
    files = batch.column(FILE_COL).dictionary_encode()
    codes = np.asarray(files.indices)
    starts = np.asarray(batch.column(BLOCK_COL))
    bounds = _runs(codes, starts)
    order = None
    if mixed:
        order = np.arange(n)  # each split one run already: its rows where they are
        firsts = bounds[:-1]
        if np.unique(np.stack([codes[firsts], starts[firsts]]), axis=1).shape[1] < len(firsts):
            order = np.lexsort((starts, codes))  # stable: each split's rows keep their order
            batch, codes, starts = batch.take(pa.array(order)), codes[order], starts[order]
            bounds = _runs(codes, starts)
    names = files.dictionary.to_pylist()
    lengths = np.asarray(batch.column(BLOCK_LEN_COL))
    for lo, hi in pairwise(bounds):
        at = order[lo:hi] if order is not None else None
        yield names[codes[lo]], int(starts[lo]), int(lengths[lo]), batch.slice(lo, hi - lo), at


def _runs(codes: np.ndarray, starts: np.ndarray) -> list[int]:
    """Where each run of rows of one split begins, and the end."""
    cuts = np.flatnonzero((codes[1:] != codes[:-1]) | (starts[1:] != starts[:-1])) + 1
    return [0, *cuts.tolist(), len(codes)]


@contextmanager
def cyclic_gc_off() -> Iterator[None]:
    """Inside a task: a batch makes a few hundred Python objects and no cycles, and the
    cyclic collector, run every 700 of them, cost ~4% of the CPU while sending and 11% of
    an ordered replay's marking (perf, py-spy). Off while the task runs."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def lines_of(handed: Iterator[pa.RecordBatch], parser: BatchParser, stats: Any = None) -> Iterator[pa.RecordBatch]:
    """What a task parses: the batches it was handed, or, handed its splits (a parser that
    ``reads_splits``), their lines, read here; ``stats.lines_read`` counts those lines, the
    report's account of every line read (Spark's input metrics, where Spark reads them)."""
    if not parser.reads_splits:
        yield from handed
        return
    from kappa_ingest.source import split_reader

    if stats is not None:
        stats.lines_read = 0
    for batch in split_reader.read(handed, encoding=parser.encoding, store=parser.store, splits=parser.splits):
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
    part = ctx.partitionId() if parts > 1 else 0
    names: dict[str, str] = {}
    for batch in lines_of(batches, parser):
        for spark_file, start, length, rows, _ in segments(batch, mixed=parts > 1 or ordered):
            name = names.get(spark_file) or names.setdefault(spark_file, canonical_file(spark_file))
            if Unit(name, start, length, part, parts) not in skip:
                yield parse(rows)
