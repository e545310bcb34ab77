"""An ordered replay's lines moved as their places alone (kappa_ingest.source.line_places):
a mark sorts as its line's file order, and the task that parses it reads the line back with
its file, split and first-line flag as the lines moved by offset have them."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from helpers import random_lines
from kappa_ingest.source import line_places, split_reader
from kappa_ingest.source.columns import (
    BLOCK_COL,
    BLOCK_LEN_COL,
    EVENT_US_COL,
    FILE_COL,
    FIRST_COL,
    LINE_AT_COL,
    LINE_COL,
    MARK_COL,
)


def test_a_marks_bytes_sort_as_its_split_then_its_offset():
    """Spark sorts a binary column bytewise, unsigned: the marks must sort as (split, offset),
    offsets past 4 GiB and split numbers past 255 included."""
    rng = np.random.default_rng(3)
    split = rng.integers(0, 70_000, 2_000)
    at = rng.integers(0, 1 << 40, 2_000)
    marks = [
        line_places.packed(int(s), np.array([a]), np.array([7]))[0].as_py() for s, a in zip(split, at, strict=True)
    ]
    assert all(len(m) == 16 for m in marks)
    by_bytes = sorted(range(len(marks)), key=lambda i: marks[i])
    assert [(split[i], at[i]) for i in by_bytes] == sorted(zip(split, at, strict=True))


def test_the_runs_splits_are_numbered_in_file_then_start_order_as_spark_orders_paths():
    """Spark orders strings by their UTF-8 bytes: the numbering must too (U+FFFD before
    U+1F600, which UTF-16's order would put the other way)."""
    files = ["file:/b.csv", "file:/a.csv", "file:/\U0001f600.csv", "file:/\ufffd.csv", "file:/é.csv"]
    batches = [
        pa.RecordBatch.from_pydict({FILE_COL: files, BLOCK_COL: [0, 100, 0, 0, 0], BLOCK_LEN_COL: [50, 20, 9, 9, 9]}),
        pa.RecordBatch.from_pydict({FILE_COL: ["file:/a.csv"], BLOCK_COL: [0], BLOCK_LEN_COL: [100]}),
    ]
    numbered = split_reader.numbered_splits(batches)
    assert [(f, s) for f, s, _ in numbered] == sorted(
        {(f, s) for b in batches for f, s in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)},
        key=lambda fs: (fs[0].encode(), fs[1]),
    )
    assert numbered[:2] == (("file:/a.csv", 0, 100), ("file:/a.csv", 100, 20))


@pytest.mark.parametrize("seed", range(3))
def test_lines_moved_by_their_places_sort_and_read_back_as_they_were_read(tmp_path, seed):
    """Lines read from several files' splits, moved as marks in any order (the event time
    beside them, as an ordered replay's sort leaves it), read back: each line's text, file,
    split and whether it is its file's first, as read; and the marks, sorted as bytes,
    give the lines in file order (file, split start, line)."""
    rnd = random.Random(seed)
    handed = []
    for name in ("a.csv", "b.csv"):
        data = random_lines(rnd, 150)
        (tmp_path / name).write_bytes(data)
        handed += [(f"file://{tmp_path / name}", s, min(89, len(data) - s)) for s in range(0, max(len(data), 1), 89)]
    splits = pa.RecordBatch.from_pydict(dict(zip((FILE_COL, BLOCK_COL, BLOCK_LEN_COL), zip(*handed, strict=True),
                                                 strict=True)))  # fmt: skip
    numbered = split_reader.numbered_splits([splits])
    number = {(f, s): i for i, (f, s, _) in enumerate(numbered)}
    read = pa.Table.from_batches(list(split_reader.read(iter([splits]), chunk_bytes=64, at=True))).combine_chunks()
    where = list(zip(read.column(FILE_COL).to_pylist(), read.column(BLOCK_COL).to_pylist(), strict=True))
    # The old mark: the first line read of a file's first split.
    first_read = [w[1] == 0 and w not in where[:i] for i, w in enumerate(where)]
    at = np.asarray(read.column(LINE_AT_COL))
    length = np.asarray(pc.binary_length(read.column(LINE_COL)))
    marks = pa.concat_arrays([line_places.packed(number[w], at[i : i + 1], length[i : i + 1])
                              for i, w in enumerate(where)])  # fmt: skip
    order = pa.array(np.random.default_rng(seed).permutation(read.num_rows))
    moved = pa.RecordBatch.from_arrays([marks.take(order), pa.array(np.arange(read.num_rows)).take(order)],
                                       names=[MARK_COL, EVENT_US_COL])  # fmt: skip
    back = pa.Table.from_batches(list(split_reader.read(iter([moved]), splits=numbered)))
    want = read.take(order)
    for c in (LINE_COL, FILE_COL, BLOCK_COL, BLOCK_LEN_COL):
        assert back.column(c).to_pylist() == want.column(c).to_pylist(), c
    assert back.column(FIRST_COL).to_pylist() == [first_read[i] for i in order.to_pylist()]
    assert back.column(EVENT_US_COL).to_pylist() == order.to_pylist()
    assert MARK_COL not in back.schema.names and LINE_AT_COL not in back.schema.names
    by_bytes = sorted(range(len(marks)), key=lambda i: marks[i].as_py())
    assert by_bytes == list(range(read.num_rows))  # the reader's order is file order


def test_a_mark_the_run_did_not_make_is_an_error_not_another_line():
    places = line_places.Places((("file:/a.csv", 0, 10),))
    unknown = pa.RecordBatch.from_arrays([line_places.packed(1, np.array([0]), np.array([3]))], names=[MARK_COL])
    with pytest.raises(ValueError, match="did not plan"):
        places.restored(unknown)
    short = pa.RecordBatch.from_arrays([pa.array([b"\x00" * 12], pa.binary())], names=[MARK_COL])
    with pytest.raises(ValueError, match="16 bytes"):
        places.restored(short)
