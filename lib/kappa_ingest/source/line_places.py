"""An ordered replay's lines moved as their places alone: each line a 16-byte mark.

An ordered replay sends every line through Spark's shuffle and sort, and Spark writes
each column of each sorted row into the Arrow batches the sink reads. A line read back from
its file needs only its place, so it moves as one binary value (MARK_COL): its split's
number in the run (the run's splits in file and offset order), its byte offset in its file,
its length; big-endian, so the bytes sort as split, then offset, which is file order (a
split's lines are in offset order). Its file's name, the split's start and length and
whether it is its file's first line are the sink's to restore from the run's numbered
splits, shipped once with its parser, not on every row.

A resumed run numbers fewer splits, in the same order: its lines sort as they would have.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kappa_ingest.source.columns import (
    BLOCK_COL,
    BLOCK_LEN_COL,
    FILE_COL,
    FIRST_COL,
    LINE_AT_COL,
    LINE_LEN_COL,
    MARK_COL,
)

Split = tuple[str, int, int]  # Spark's file path, the split's start and length
MARK = np.dtype([("split", ">u4"), ("at", ">i8"), ("len", ">i4")])


def packed(split: int, at: np.ndarray, length: np.ndarray) -> pa.Array:
    """The marks of lines of split number ``split`` at byte offsets ``at``, ``length`` bytes
    long, as a binary array of 16-byte values."""
    n = len(at)
    marks = np.empty(n, MARK)
    marks["split"], marks["at"], marks["len"] = split, at, length
    offsets = np.arange(0, MARK.itemsize * (n + 1), MARK.itemsize, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(marks)])


class Places:
    """The run's numbered splits, as arrays a task looks its lines' splits up in."""

    def __init__(self, splits: tuple[Split, ...]):
        names = sorted({f for f, _, _ in splits})
        self.files = pa.array(names, pa.string())
        code = {f: i for i, f in enumerate(names)}
        self.file_of = np.array([code[f] for f, _, _ in splits], dtype=np.int32)
        self.start = np.array([s for _, s, _ in splits], dtype=np.int64)
        self.length = np.array([n for _, _, n in splits], dtype=np.int64)

    def restored(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its lines' marks (MARK_COL) turned into the columns of a line moved
        by its offset: its file (dictionary-encoded), split start and length, first-line
        flag, offset and length."""
        marks = _marks(batch.column(MARK_COL))
        split = marks["split"].astype(np.intp)
        if len(split) and split.max() >= len(self.file_of):
            raise ValueError("a moved line names a split the run did not plan")
        at = marks["at"].astype(np.int64)
        placed = {
            # As a dictionary: the reading back groups lines by file (split_reader.with_lines).
            FILE_COL: pa.DictionaryArray.from_arrays(pa.array(self.file_of[split]), self.files),
            BLOCK_COL: pa.array(self.start[split]),
            BLOCK_LEN_COL: pa.array(self.length[split]),
            FIRST_COL: pa.array(at == 0),  # a file's first line begins at its first byte
            LINE_AT_COL: pa.array(at),
            LINE_LEN_COL: pa.array(marks["len"].astype(np.int32)),
        }
        rest = [n for n in batch.schema.names if n != MARK_COL]
        return pa.RecordBatch.from_arrays([*placed.values(), *(batch.column(n) for n in rest)],
                                          names=[*placed, *rest])  # fmt: skip


def _marks(column: pa.Array) -> np.ndarray:
    """The 16-byte values of a binary array, read in place as MARK records."""
    n = len(column)
    if n == 0:
        return np.empty(0, MARK)
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * column.offset)
    if column.null_count or np.any(np.diff(offsets) != MARK.itemsize):
        raise ValueError(f"a moved line's mark is not {MARK.itemsize} bytes")
    return np.frombuffer(column.buffers()[2], dtype=MARK, count=n, offset=int(offsets[0]))
