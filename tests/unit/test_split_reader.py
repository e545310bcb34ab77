"""The Python worker's own reading of a split gives the lines Hadoop's LineRecordReader
(Spark's text scan) gives: the same terminators, the same line in the same split. Against
a line-by-line transcription of LineRecordReader here; against Spark's scan itself in
tests/integration/test_split_reader_vs_spark.py."""

from __future__ import annotations

import random

import pytest

from helpers import random_lines, split_by_rule
from kappa_ingest.source import split_reader


def _hadoop(data: bytes, start: int, length: int) -> list[bytes]:
    """LineRecordReader, line by line: a split after the first skips the line it begins
    in; lines are read while the position is at or before the split's end."""

    def read_line(pos: int) -> tuple[bytes, int] | None:
        if pos >= len(data):
            return None
        i = pos
        while i < len(data) and data[i] not in (10, 13):
            i += 1
        if i == len(data):
            return data[pos:i], i
        crlf = data[i] == 13 and i + 1 < len(data) and data[i + 1] == 10
        return data[pos:i], i + (2 if crlf else 1)

    return split_by_rule(read_line, start, start + length, skip=start != 0)


@pytest.fixture(params=["C", "numpy"])
def loops(request, monkeypatch):
    """The C line ends and copies, and numpy's where the C loops are unavailable."""
    from kappa_ingest import native

    if request.param == "numpy":
        for name in ("line_ends", "gather"):
            monkeypatch.setattr(native, name, lambda *a: (_ for _ in ()).throw(native.NativeUnavailable("no cc")))
    return request.param


def _ours(path, data: bytes, split: int, chunk: int) -> list[list[bytes]]:
    return [
        [b for arr in split_reader.split_lines(str(path), s, min(split, len(data) - s), chunk_bytes=chunk)
         for b in arr.to_pylist()]
        for s in range(0, max(len(data), 1), split)
    ]  # fmt: skip


@pytest.mark.parametrize("seed", range(8))
def test_every_line_in_the_split_hadoop_puts_it_in(tmp_path, seed, loops):
    rnd = random.Random(seed)
    data = random_lines(rnd, rnd.choice([1, 5, 50, 300]))
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    for split in {1, 2, 3, 7, 16, 64, 999, max(1, len(data) // 3)}:
        want = [_hadoop(data, s, min(split, len(data) - s)) for s in range(0, max(len(data), 1), split)]
        for chunk in (1, 5, 1 << 20):
            assert _ours(path, data, split, chunk) == want, (split, chunk)


@pytest.mark.parametrize("data", [b"", b"\n", b"\r\n", b"\r", b"a", b"a\n", b"\n\n", b"\r\r", b"a\r\nb", b"x" * 5000])
def test_edge_files(tmp_path, data, loops):
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    for split in (1, 2, 3, 10_000):
        want = [_hadoop(data, s, min(split, len(data) - s)) for s in range(0, max(len(data), 1), split)]
        assert _ours(path, data, split, 2) == want, split


@pytest.mark.parametrize("seed", range(4))
def test_lines_moved_by_their_offsets_read_back_as_they_were(tmp_path, seed, monkeypatch):
    """A shuffle moves a line as its file, offset and length; the task that parses it reads
    the same bytes back, whatever order the lines arrive in, from several files at once
    (the C copy, and numpy where the C loops are unavailable)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from kappa_ingest import native
    from kappa_ingest.source.columns import BLOCK_COL, BLOCK_LEN_COL, FILE_COL, LINE_AT_COL, LINE_COL, LINE_LEN_COL

    rnd = random.Random(seed)
    handed, want = [], []
    for name in ("a.csv", "b.csv"):
        data = random_lines(rnd, 200)
        (tmp_path / name).write_bytes(data)
        for s in range(0, max(len(data), 1), 97):
            handed.append((f"file://{tmp_path / name}", s, min(97, len(data) - s)))
    splits = pa.RecordBatch.from_pydict(
        dict(zip((FILE_COL, BLOCK_COL, BLOCK_LEN_COL), zip(*handed, strict=True), strict=True))
    )
    read = pa.Table.from_batches(list(split_reader.read(iter([splits]), chunk_bytes=64, at=True))).combine_chunks()
    want = read.column(LINE_COL).to_pylist()
    order = np.random.default_rng(seed).permutation(read.num_rows)
    moved = read.drop_columns([LINE_COL]).append_column(
        LINE_LEN_COL, pc.binary_length(read.column(LINE_COL)).cast(pa.int32())
    )
    moved = moved.take(pa.array(order)).to_batches()[0]
    for c_loops in (True, False):
        if not c_loops:
            monkeypatch.setattr(native, "gather", lambda *a: (_ for _ in ()).throw(native.NativeUnavailable("no cc")))
        back = split_reader.with_lines(moved)
        assert back.schema.names == [LINE_COL, FILE_COL, BLOCK_COL, BLOCK_LEN_COL]
        assert back.column(LINE_COL).to_pylist() == [want[i] for i in order]
    assert LINE_AT_COL not in back.schema.names


def test_lines_moved_by_their_offsets_are_read_back_in_batches_a_binary_array_holds(tmp_path, monkeypatch):
    """However many moved lines Spark hands a task at once, each batch read back holds at
    most GATHER_BYTES of lines (32-bit offsets), a longer line alone, every line once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kappa_ingest.source.columns import BLOCK_COL, BLOCK_LEN_COL, FILE_COL, LINE_COL, LINE_LEN_COL

    data = b"".join(b"%d,%s\n" % (i, b"x" * (60 if i == 7 else i % 13)) for i in range(60))
    (tmp_path / "a.csv").write_bytes(data)
    splits = pa.RecordBatch.from_pydict({FILE_COL: [f"file://{tmp_path / 'a.csv'}"], BLOCK_COL: [0],
                                         BLOCK_LEN_COL: [len(data)]})  # fmt: skip
    read = pa.Table.from_batches(list(split_reader.read(iter([splits]), at=True))).combine_chunks()
    want = data.split(b"\n")[:-1]
    moved = read.drop_columns([LINE_COL]).append_column(
        LINE_LEN_COL, pc.binary_length(read.column(LINE_COL)).cast(pa.int32())
    )
    monkeypatch.setattr(split_reader, "GATHER_BYTES", 40)
    back = list(split_reader.read(iter(moved.to_batches())))
    sizes = [sum(len(x) for x in b.column(LINE_COL).to_pylist()) for b in back]
    assert len(back) > 5 and all(s <= 40 or b.num_rows == 1 for s, b in zip(sizes, back, strict=True))
    assert max(sizes) > 40  # line 7, longer than the limit, alone
    assert [x for b in back for x in b.column(LINE_COL).to_pylist()] == want


def test_a_line_past_its_files_end_is_an_error_not_other_bytes(tmp_path):
    import pyarrow as pa

    from kappa_ingest.source.columns import FILE_COL, LINE_AT_COL, LINE_LEN_COL

    (tmp_path / "a.csv").write_bytes(b"abc\n")
    batch = pa.RecordBatch.from_pydict({FILE_COL: [f"file://{tmp_path / 'a.csv'}"], LINE_AT_COL: [2],
                                        LINE_LEN_COL: pa.array([3], pa.int32())})  # fmt: skip
    with pytest.raises(ValueError, match="past the end of its file"):
        split_reader.with_lines(batch)
