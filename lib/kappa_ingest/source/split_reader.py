"""A task's splits of local files read by its Python worker, straight into Arrow.

Spark's text scan reads lines in the JVM (Hadoop's LineRecordReader), makes a row of each
and sends them to the Python worker as Arrow batches: per row work on a JVM that shares
the cores with the worker and the broker, and a JIT compiling that work during the run.
Where every input is a local file (a path each executor reads, as the plan's files are),
each task is handed its splits instead (``path, start, length``: :func:`frame`) and its
Python worker reads their bytes itself (:func:`read`), a few MB at a time, into batches
of the same columns the text scan gives (line, file, split start and length), with the
same lines in each split:

- a line ends at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (LineRecordReader's default), its
  terminator not part of it; a last line without one ends at the end of the file;
- a split ``[start, start + length)`` holds the lines that begin in ``(start, start +
  length]`` (the first split: from 0): a split after the first skips the line it begins
  in, and reads on past its end to finish the last line it began. Every line is in one
  split, as Hadoop has it, so a unit of the ledger is the same lines on either path;
- a ``.gz`` file is left to Spark's scan (one split, Hadoop's codec judging the stream);
- in UTF-16 (``width`` 2) the same holds of 16-bit units, in the file's byte order: a
  line ends at the unit ``\\n`` or ``\\r``, and a split's bounds are taken down to an even
  offset (Spark's text scan, which cuts at bytes, cannot read such files). A last odd
  byte stays with the last line, which then does not decode and is quarantined.

Lines an ordered replay moves (:mod:`kappa_ingest.source.line_shuffle`) need not carry their
text through Spark's shuffle and sort: read with their byte offsets (``read(at=True)``),
they move as offset and length (an ordered replay's, as their places:
:mod:`kappa_ingest.source.line_places`), and the task that parses them reads them back
from the file (:func:`with_lines`), which the page cache still holds.

Line bounds are found with numpy over each chunk's bytes; a line's bytes are copied once,
into the batch (a line holds no ``\\r`` or ``\\n``, so the chunk less those bytes is the
batch's data). Nothing per line is a Python object.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from kappa_ingest.s3.access import is_s3
from kappa_ingest.source import line_places, opening, transcode
from kappa_ingest.source.columns import (
    BLOCK_COL,
    BLOCK_LEN_COL,
    FILE_COL,
    LINE_AT_COL,
    LINE_COL,
    LINE_LEN_COL,
    MARK_COL,
)
from kappa_ingest.source.splits import Plan, canonical_file

CHUNK_BYTES = 2 << 20  # about Spark's 10,000-row Arrow batches of the test layouts
SPLITS_DDL = f"{FILE_COL} string, {BLOCK_COL} long, {BLOCK_LEN_COL} long"
_TASK = "_kappa_task"  # the task a split is handed to, while the frame is made
LF, CR = 10, 13


def usable(uris: list[str]) -> bool:
    """Whether the tasks can read every input themselves: local uncompressed files, or
    objects in a store (Spark has no way to read those here) beside any local files. (A
    local ``.gz`` file is one split either way; with local inputs only, Hadoop's codec is
    left to judge a damaged stream or one with trailing bytes, as the hostile-input tests
    pin down.)"""
    if not uris:
        return False
    if any(is_s3(u) for u in uris):
        return all(is_s3(u) or urlparse(u).scheme in ("", "file") for u in uris)
    return all(urlparse(u).scheme == "file" and not u.endswith(".gz") for u in uris)


def spark_file_path(uri: str) -> str:
    """A file's name as Spark's scan gives it in ``_metadata.file_path`` (``file:/a%20b.csv``)
    from the one ``DataFrame.inputFiles`` gives (``file:///a%20b.csv``)."""
    return "file:/" + uri.removeprefix("file:///") if uri.startswith("file:///") else uri


def assignments(plan: Plan, uris: list[str], tasks: int) -> list[list[tuple[str, int, int]]]:
    """The splits of ``uris`` (Spark's names of the files: ``file:/...``) in ``tasks``
    groups of about equal bytes, largest splits placed first, as Spark packs a scan's."""
    splits = []
    for uri in uris:
        f = plan.file(canonical_file(uri))
        assert f is not None, uri
        splits += [(uri, start, length) for start, length in plan.splits(f)]
    splits.sort(key=lambda s: -s[2])
    groups: list[list[tuple[str, int, int]]] = [[] for _ in range(max(1, min(tasks, len(splits))))]
    load = [0] * len(groups)
    for s in splits:
        i = load.index(min(load))
        groups[i].append(s)
        load[i] += s[2] or 1
    for g in groups:  # each task reads its splits in file order
        g.sort(key=lambda s: (s[0], s[1]))
    return groups


def frame(spark: SparkSession, plan: Plan, uris: list[str], tasks: int) -> tuple[DataFrame, list[pa.RecordBatch]]:
    """One row per split, each task's splits in a partition of their own, in file order;
    and each task's rows of it, as a batch (what a Python RDD of the tasks hands each one).

    The frame is for what reads the input as a DataFrame (the quality gate, the quarantine,
    Spark's Kafka sink); the producers' send is an RDD of the batches, which has nothing to
    plan (``sinks.partition_runner``). Made in the JVM alone: ``range`` puts task ``i``'s
    number in partition ``i``, and the splits, broadcast, join it there. (Made from a Python
    RDD and turned into a DataFrame, each task needed a second Python worker to hand the
    sending one its splits: a 20,000-row run started 6 Python processes, not 3, and sent for
    2.9-4.2 s, not 1.7-2.0 s, on 2 cores.)"""
    from pyspark.sql import functions as F

    groups = assignments(plan, uris, tasks)
    handed = [pa.RecordBatch.from_arrays([pa.array([s[k] for s in g], t) for k, t in
                                          enumerate((pa.string(), pa.int64(), pa.int64()))],
                                         names=[FILE_COL, BLOCK_COL, BLOCK_LEN_COL]) for g in groups]  # fmt: skip
    task_of = pa.array([i for i, g in enumerate(groups) for _ in g], pa.int64())
    # An Arrow table: a local relation, no job to make it.
    splits = spark.createDataFrame(pa.Table.from_batches(handed).append_column(_TASK, task_of))
    tasks_df = spark.range(0, len(groups), 1, len(groups)).withColumnRenamed("id", _TASK)
    df = (tasks_df.join(F.broadcast(splits), _TASK).drop(_TASK)
          .sortWithinPartitions(FILE_COL, BLOCK_COL))  # fmt: skip
    return df, handed


def handed_splits(handed: list[pa.RecordBatch]) -> list[tuple[str, int, int]]:
    """The splits a task was handed (its frame's rows), in the order it reads them:
    ``(file as the ledger names it, start, length)``."""
    return [(canonical_file(f), s, n) for f, s, n in _rows(handed)]


def numbered_splits(handed: list[pa.RecordBatch]) -> tuple[line_places.Split, ...]:
    """The splits the tasks are handed, as Spark names their files, in the order a moved
    line's mark sorts them (:mod:`kappa_ingest.source.line_places`): by file, then start
    (Spark's string order is bytewise, as Python's is of code points)."""
    return tuple(sorted(_rows(handed)))


def _rows(handed: list[pa.RecordBatch]) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for b in handed:
        out += zip(*(b.column(c).to_pylist() for c in (FILE_COL, BLOCK_COL, BLOCK_LEN_COL)), strict=True)
    return out


def read(
    handed: Iterator[pa.RecordBatch],
    chunk_bytes: int = CHUNK_BYTES,
    at: bool = False,
    encoding: str = "utf-8",
    store: opening.Store | None = None,
    splits: tuple[line_places.Split, ...] = (),
) -> Iterator[pa.RecordBatch]:
    """The lines of the splits a task was handed, as batches of the text scan's columns;
    ``at``: with each line's byte offset in its file (LINE_AT_COL) too; ``encoding``: the
    files' (UTF-16 is read by unit; any other by byte); ``store``: where objects are.

    Handed lines moved by a shuffle without their text (LINE_AT_COL and LINE_LEN_COL in
    place of LINE_COL: :mod:`kappa_ingest.source.line_shuffle`; or by their places alone,
    MARK_COL, of ``splits``), the lines are read from the files at those offsets
    (:func:`with_lines`); moved with their text, they are the batch."""
    opening.use(store)
    places = None
    for batch in handed:
        if MARK_COL in batch.schema.names:
            places = places or line_places.Places(splits)
            batch = places.restored(batch)
        if LINE_AT_COL in batch.schema.names:
            yield from (with_lines(part) for part in _by_line_bytes(batch, GATHER_BYTES))
            continue
        if LINE_COL in batch.schema.names:  # lines moved with their text (a gzipped object's)
            yield batch
            continue
        for uri, start, length in zip(*(batch.column(c).to_pylist() for c in (FILE_COL, BLOCK_COL, BLOCK_LEN_COL)),
                                      strict=True):  # fmt: skip
            file = pa.scalar(uri, pa.string())
            order = transcode.byte_order(encoding, uri) if transcode.wide(encoding) else None
            for lines, starts in _split_chunks(uri, start, length, chunk_bytes, order):
                n = len(lines)
                columns = [lines, pa.repeat(file, n), pa.repeat(pa.scalar(start, pa.int64()), n),
                           pa.repeat(pa.scalar(length, pa.int64()), n)]  # fmt: skip
                names = [LINE_COL, FILE_COL, BLOCK_COL, BLOCK_LEN_COL]
                if at:
                    columns.append(pa.array(starts))
                    names.append(LINE_AT_COL)
                yield pa.RecordBatch.from_arrays(columns, names=names)


# The bytes of lines read back into one batch at most: a binary array's offsets are 32-bit,
# and Spark hands a task as many moved lines at once as its row cap says.
GATHER_BYTES = 1 << 30


def _by_line_bytes(batch: pa.RecordBatch, limit: int) -> Iterator[pa.RecordBatch]:
    """A batch of lines moved by their offsets, in slices of at most ``limit`` bytes of
    lines (a longer line alone)."""
    ends = np.cumsum(np.asarray(batch.column(LINE_LEN_COL), dtype=np.int64))
    lo = 0
    while lo < batch.num_rows:
        before = int(ends[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, before + limit, side="right")))
        yield batch.slice(lo, hi - lo)
        lo = hi


def with_lines(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of lines moved by their offsets (LINE_AT_COL, LINE_LEN_COL) with their text
    read from the files (LINE_COL first, the offsets dropped): one copy per line, from
    each file mapped into memory (the page cache the scan read it through)."""
    files = batch.column(FILE_COL).dictionary_encode()  # a restored place's is one already
    uris = files.dictionary.to_pylist()
    indices = np.asarray(files.indices, dtype=np.int32)
    at = np.asarray(batch.column(LINE_AT_COL), dtype=np.int64)
    length = np.asarray(batch.column(LINE_LEN_COL), dtype=np.int32)
    if any(is_s3(u) for u in uris):
        lines = _object_lines(uris, indices, at, length)
    else:
        maps = [pa.memory_map(opening.local_path(uri)) for uri in uris]
        try:
            lines = native_gather([m.read_buffer() for m in maps], indices, at, length)
        finally:
            for m in maps:
                m.close()
    rest = [n for n in batch.schema.names if n not in (LINE_AT_COL, LINE_LEN_COL)]
    columns = [_as_text(batch.column(n)) for n in rest]
    return pa.RecordBatch.from_arrays([lines, *columns], names=[LINE_COL, *rest])


def _as_text(column: pa.Array) -> pa.Array:
    """A restored place's file column, dictionary-encoded, as the text the parser reads; any other as it is."""
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


def _object_lines(uris: list[str], indices: np.ndarray, at: np.ndarray, length: np.ndarray) -> pa.Array:
    """:func:`with_lines` of objects in a store: each file's lines read with a GET per run of
    nearby lines (not one per line), then gathered as from a local file."""
    from kappa_ingest.s3.objects import read_ranges

    sources, where = [], np.empty(len(at), dtype=np.int64)
    for i, uri in enumerate(uris):
        mine = np.flatnonzero(indices == i)
        with opening.open_input(uri) as f:
            blocks = read_ranges(f, list(zip(at[mine].tolist(), length[mine].tolist(), strict=True)))
        offsets, pos = {}, 0
        for off, block in blocks.items():
            offsets[off] = pos
            pos += len(block)
        sources.append(pa.py_buffer(b"".join(blocks.values())))
        where[mine] = [offsets[a] for a in at[mine].tolist()]
    return native_gather(sources, indices, where, length)


def native_gather(sources: list[pa.Buffer], file: np.ndarray, at: np.ndarray, length: np.ndarray) -> pa.Array:
    """Line ``i``: ``length[i]`` bytes of ``sources[file[i]]`` from ``at[i]``, as a binary
    array (C's kg_gather; numpy where the C loops are unavailable)."""
    from kappa_ingest import native

    n = len(at)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"{offsets[-1]} bytes of lines in one batch: more than a binary array holds")
    offsets = offsets.astype(np.int32)
    sizes = np.array([b.size for b in sources], dtype=np.int64)
    if n and (np.any(at < 0) or np.any(at + length > sizes[file])):
        raise ValueError("a moved line lies past the end of its file (was it changed during the run?)")
    try:
        data = native.gather(sources, file, at, length, int(offsets[-1]))
    except native.NativeUnavailable:
        whole = [np.frombuffer(b, dtype=np.uint8) for b in sources]
        data = pa.py_buffer(np.concatenate([whole[f][a : a + k] for f, a, k in zip(file, at, length, strict=True)])
                            if n else b"")  # fmt: skip
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), data])


def split_lines(
    path: str, start: int, length: int, chunk_bytes: int = CHUNK_BYTES, order: str | None = None
) -> Iterator[pa.Array]:
    """The lines of the split ``[start, start + length)`` of ``path``, a binary array per
    chunk read (see the module's docstring for which lines a split holds); ``order``:
    ``<`` or ``>`` for a UTF-16 file in that byte order."""
    for lines, _ in _split_chunks(path, start, length, chunk_bytes, order):
        yield lines


def _split_chunks(
    path: str, start: int, length: int, chunk_bytes: int, order: str | None = None
) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """split_lines' arrays, each with its lines' byte offsets in the file."""
    width = 1 if order is None else 2
    skip = start != 0  # the line the split begins in is the previous split's
    compressed = path.endswith(".gz")  # one split, its length the compressed size: read to its end
    end = (1 << 62) if compressed else start + length
    if width == 2:  # lines begin at even offsets: (start, end] holds the same ones as these
        start, end = start & ~1, end & ~1
    with opening.open_input(path, decompress=compressed) as f:
        if start:
            f.seek(start)
        at = start  # the file offset of buf[0]
        buf = b""
        want = chunk_bytes
        while True:
            data = f.read(want)
            eof = not data
            buf = buf + data if buf else data
            if not buf:
                return
            if width == 1:
                lines, used, last, starts = _complete_lines(buf, at, end, skip, eof)
            else:
                lines, used, last, starts = _complete_units(buf, at, end, skip, eof, order)
            if lines is not None:
                skip = False
                if len(lines):
                    yield lines, starts + at
            if last or eof:
                return
            # No line ended in the buffer (a long one): read as much again next time.
            want = chunk_bytes if used else len(buf)
            buf, at = buf[used:], at + used


def _complete_units(
    buf: bytes, at: int, end: int, skip: bool, eof: bool, order: str
) -> tuple[pa.Array | None, int, bool, np.ndarray]:
    """:func:`_complete_lines` of a UTF-16 ``buf`` (``order``: its byte order), by unit. A
    stray byte at the end of the file ends its last line, or is a line after a line end."""
    k = len(buf) & ~1
    if not k and not eof:
        return None, 0, False, np.zeros(0, dtype=np.int64)
    found = _complete_lines(buf[:k], at, end, skip, eof, order + "u2")
    lines, _, last, starts = found
    if k == len(buf) or not eof or lines is None:
        return found  # (before the end of the file an odd byte waits for the next chunk)
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1).copy()
    if not k or _unit(buf, k - 2, order) not in (LF, CR):  # the last line runs to the stray byte
        if not (len(lines) and starts[-1] + offsets[-1] - offsets[-2] == k):
            return found  # that line is the next split's, or the one skipped
        offsets[-1] += 1
    elif k <= end - at:  # a line of its own, begun within the split
        offsets, starts = np.append(offsets, offsets[-1] + 1), np.append(starts, k)
    else:
        return found
    held = lines.buffers()[2]
    data = (held.to_pybytes()[: int(offsets[-1]) - 1] if held is not None else b"") + buf[-1:]
    array = pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return array, len(buf), last, starts


def _unit(buf: bytes, i: int, order: str) -> int:
    return int.from_bytes(buf[i : i + 2], "little" if order == "<" else "big")


def _complete_lines(
    buf: bytes, at: int, end: int, skip: bool, eof: bool, unit: str = "u1"
) -> tuple[pa.Array | None, int, bool, np.ndarray]:
    """The complete lines of ``buf`` (at file offset ``at``) that begin at or before
    ``end``, as ``(lines, bytes used, whether the split's last line is among them, where
    each line begins in buf)``; ``lines`` is None if the line to skip has not ended
    within ``buf``. ``unit``: the numpy type of a character's unit (``<u2``: UTF-16LE);
    offsets and lengths are counted in units, and returned in bytes."""
    none = np.zeros(0, dtype=np.int64)
    t = np.frombuffer(buf, dtype=unit)
    w = t.itemsize
    end, at = end // w, at // w  # (at and end are even where units are two bytes)
    ends, term = _line_ends(buf, t, eof)  # where the next line begins
    starts = np.concatenate([[0], ends])
    if eof and ends.size and ends[-1] == len(t):
        starts = starts[:-1]  # the file ends with a line end: no line after it
    complete = ends.size  # lines [starts[i], ends[i]) have ended; at eof the rest is one more
    first = 0
    if skip:
        if not complete:
            return (None, 0, False, none) if not eof else (pa.array([], pa.binary()), len(buf), True, none)
        first = 1
    n_lines = len(starts) if eof else complete
    # Lines that begin after the split's end are the next split's; so is an unfinished one.
    within = int(np.searchsorted(starts[:n_lines], end - at, side="right"))
    last = eof or within < n_lines or int(starts[complete]) > end - at
    lo, hi = first, max(first, within)
    if hi <= lo:
        return pa.array([], pa.binary()), (int(ends[complete - 1]) if complete else 0) * w, last, none
    line_starts = starts[lo:hi]
    ended = min(hi, complete) - lo
    line_stops = np.append(ends[lo : lo + ended], np.full(hi - lo - ended, len(t), dtype=np.int64))
    # Each line's length: its bytes less its terminator's (LF, CRLF or CR; none at eof).
    terminators = np.zeros(hi - lo, dtype=np.int64)
    terminators[:ended] = term[lo : lo + ended]
    lengths = (line_stops - line_starts) - terminators
    offsets = np.zeros(hi - lo + 1, dtype=np.int32)
    np.cumsum(lengths * w, out=offsets[1:])
    data = _cut(buf, t, line_starts, line_stops, terminators, int(offsets[-1]))
    lines = pa.Array.from_buffers(pa.binary(), hi - lo, [None, pa.py_buffer(offsets), data])
    used = int(ends[complete - 1]) if complete else 0
    return lines, used * w, last, line_starts.astype(np.int64) * w


def _line_ends(buf: bytes, t: np.ndarray, eof: bool) -> tuple[np.ndarray, np.ndarray]:
    """Where the next line begins after each line end of ``t`` (LF, CRLF or a lone CR: a CR
    last in ``t`` ends a line only at ``eof``), and each end's units (2 for CRLF). In C
    for bytes (one memchr a line); numpy's, a pass over every unit per array, for UTF-16
    and where the C loops are unavailable."""
    from kappa_ingest import native

    if t.itemsize == 1:
        try:
            return native.line_ends(buf, eof)
        except native.NativeUnavailable:
            pass
    lf, cr = t == LF, t == CR
    lone_cr = cr.copy()
    lone_cr[:-1] &= ~lf[1:]  # a CR before an LF is the CRLF's first unit
    if not eof and cr.size and cr[-1]:
        lone_cr[-1] = False  # an LF may follow in the next chunk: not ended yet
    ends = np.flatnonzero(lf | lone_cr) + 1
    crlf = (ends >= 2) & lf[ends - 1] & cr[np.maximum(ends - 2, 0)]
    return ends, 1 + crlf.astype(np.uint8)


def _cut(
    buf: bytes, t: np.ndarray, starts: np.ndarray, stops: np.ndarray, terminators: np.ndarray, size: int
) -> pa.Buffer:
    """The bytes of lines ``[starts, stops)`` of ``t`` less their ``terminators``' last
    units, one after another: C's copy a line; numpy's, a mask over every unit."""
    from kappa_ingest import native

    w = t.itemsize
    try:
        return native.gather([pa.py_buffer(buf)], np.zeros(len(starts), dtype=np.int32), starts * w,
                             ((stops - starts - terminators) * w).astype(np.int32), size)  # fmt: skip
    except native.NativeUnavailable:
        begin, stop = int(starts[0]), int(stops[-1])
        keep = np.ones(stop - begin, dtype=bool)
        for back in (1, 2):  # a terminator's last unit, and a CRLF's CR
            keep[(stops - begin - back)[terminators >= back]] = False
        return pa.py_buffer(t[begin:stop][keep])
