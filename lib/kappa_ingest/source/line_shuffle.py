"""Raw lines moved between tasks before they are parsed: the line path's shuffle and sort.

Two kinds of run need rows in other tasks, or another order, than the file scan gives:
more producers than the files split into (``--partitions``), and replays in event-time
order (``--order-by-event-time``, ``--replay-speed``). A raw line is one string, cheaper
to move and sort than the parsed row, so each scan task marks its lines and they are
moved and sorted as they are; the sink parses them after, on the line path, each batch
cut by split (:mod:`kappa_ingest.source.task_input`).

A line's marks: whether it is its file's first line (the header, or a BOM to take off:
position tells no more once lines move), its number in its split (ties in event time
keep the file's order) and, for an ordered replay, its key and event time, found by the
same Arrow parser and typing the sink uses. A line that does not parse has neither and
sorts first; the sink quarantines it with its reason. An ordered replay of splits the
tasks read moves each line as its place alone (:mod:`kappa_ingest.source.line_places`):
one 16-byte value for the sort and for Spark to hand the sink, where its file, split and
first-line flag were columns on every row; where Python tasks can, they move and sort the
places themselves, Spark's shuffle moving only bytes (:func:`places_in_event_time_order`).

A row's part of its split is a function of its own text (its line, or its key; a UTF-16
line, moved by offset: its place in its file), never of the files read beside it, so a
unit is the same rows in every run and in its resume. An ordered replay's part is the
partition Kafka's own partitioner gives the record's key among the parts (``by_keys``):
with as many parts as the topic has partitions (or a multiple, or a divisor), each task
sends to its own partitions only, so its producer fills whole batches of one partition
at a time as a keyless one does, and every record of a key is sent by one task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import RDD, SparkContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kappa_ingest import native
from kappa_ingest.source import line_places
from kappa_ingest.source.columns import (
    BLOCK_COL,
    EVENT_TS_COL,
    EVENT_US_COL,
    FILE_COL,
    FIRST_COL,
    KEY_COL,
    LINE_AT_COL,
    LINE_COL,
    LINE_LEN_COL,
    LINE_NO_COL,
    MARK_COL,
    PART_COL,
)
from kappa_ingest.source.parsing import LineParser, Parsed
from kappa_ingest.source.records import key_text
from kappa_ingest.source.typed import TS_TYPE, Typing


def marked(
    lines: DataFrame,
    parser: LineParser,
    order: Typing | None = None,
    key: str | None = None,
    whole: bool = False,
    parts: int | None = None,
) -> DataFrame:
    """``lines`` (the file scan's raw lines, or a task's splits to read: a parser that
    ``reads_splits``) with their marks (:func:`marking`)."""
    mark, fields = marking(lines.schema, parser, order, key, whole, parts)
    return lines.mapInArrow(mark, fields)


Marking = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def marking(
    schema: StructType,
    parser: LineParser,
    order: Typing | None = None,
    key: str | None = None,
    whole: bool = False,
    parts: int | None = None,
) -> tuple[Marking, str]:
    """The task function that marks the lines of batches of ``schema`` (the file scan's raw
    lines, or a task's splits to read: a parser that ``reads_splits``), and the schema of
    what it yields; ``order``: the typing that finds each line's event time (and ``key``,
    its key), for a replay in that order. With ``parts``, a keyed line is marked with its
    part's token (PART_COL, ``by_keys``); without, with its key's text (KEY_COL: the parts
    of a run planned before).

    Splits read here move without their text: each line's byte offset and length in its
    file instead (an eighth of a wide line's bytes through the shuffle and the sort), read
    back from the file by the task that parses it (:func:`kappa_ingest.source.split_reader.with_lines`);
    in an ordered replay, its place alone (:mod:`kappa_ingest.source.line_places`). ``whole``:
    with their text all the same (a gzipped object's offsets are in its text, which no
    ranged read finds)."""
    spans = parser.reads_splits
    by_offset = spans and not whole
    placed = by_offset and order is not None and bool(parser.splits)
    fields = [f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields]
    if placed:
        fields = [f"{MARK_COL} binary"]
    elif by_offset:  # the scan's columns (its text aside) come in the order split_reader.read gives them
        fields += [f"{LINE_AT_COL} long", f"{FIRST_COL} boolean", f"{LINE_NO_COL} long", f"{LINE_LEN_COL} int"]
    else:
        fields = ([f"{LINE_COL} binary"] if spans else []) + fields + [f"{FIRST_COL} boolean", f"{LINE_NO_COL} long"]
    by_part = key is not None and parts is not None
    if order is not None:
        fields += [f"{PART_COL} int" if by_part else f"{KEY_COL} string", f"{EVENT_US_COL} long"]
    # Only the key and the event time are typed; the key as the record's (kept by_keys).
    key_types = tuple((c, t) for c, t in order.types if c == key) if order is not None and by_part else ()
    event_only = Typing(key_types, order.null_values, order.event_column, order.event_format) if order else None
    tokens = part_tokens(parts) if by_part else None
    splits = parser.splits

    def mark(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kappa_ingest.source import split_reader
        from kappa_ingest.source.task_input import cyclic_gc_off, segments

        # Only the key and the event time are converted: a third of the cost of every column.
        parse = replace(parser, wanted=tuple(c for c in (key, order.event_column) if c) if order else ()).fresh()
        counted: dict[tuple[str, int], int] = {}  # a split's lines may come over several batches
        number = {(f, s): i for i, (f, s, _) in enumerate(splits)} if placed else {}
        made = None  # the schema of what it yields, from its first batch
        with cyclic_gc_off():
            for batch in (
                split_reader.read(batches, at=by_offset, encoding=parser.encoding, store=parser.store)
                if spans
                else batches
            ):
                # A scan task reads its splits' lines in order; a batch may hold several splits.
                for file, start, _, rows, _ in segments(batch):
                    if placed:
                        out, names = [_places(rows, number, file, start)], [MARK_COL]
                    else:
                        out, names = _numbered(rows, file, start, counted, by_offset)
                    if event_only is not None:
                        out += _key_and_event_time(parse(rows), rows.num_rows, key, event_only, tokens)
                        names += [PART_COL if tokens is not None else KEY_COL, EVENT_US_COL]
                    made = made or _schema(names, out)
                    yield pa.RecordBatch.from_arrays(out, schema=made)

    return mark, ", ".join(fields)


def _places(rows: pa.RecordBatch, number: dict[tuple[str, int], int], file: str, start: int) -> pa.Array:
    """A split's run of lines as their marks: the split's number, each line's offset and length."""
    if (file, start) not in number:
        raise ValueError(f"the split at {start} of {file} is not one of the run's numbered splits")
    length = np.asarray(pc.binary_length(rows.column(LINE_COL)))
    return line_places.packed(number[(file, start)], np.asarray(rows.column(LINE_AT_COL)), length)


def _numbered(
    rows: pa.RecordBatch, file: str, start: int, counted: dict[tuple[str, int], int], by_offset: bool
) -> tuple[list[pa.Array], list[str]]:
    """A split's run of lines with whether each is its file's first and its number in the
    split; moved by offset: its length in place of its text."""
    before = counted.get((file, start), 0)
    counted[(file, start)] = before + rows.num_rows
    line_no = np.arange(before, before + rows.num_rows, dtype=np.int64)
    out = [*rows.columns, pa.array((line_no == 0) & (start == 0)), pa.array(line_no)]
    names = [*rows.schema.names, FIRST_COL, LINE_NO_COL]
    if by_offset:  # the line's place in its file, not its text
        text = names.index(LINE_COL)
        out.append(pc.binary_length(out[text]).cast(pa.int32()))
        names.append(LINE_LEN_COL)
        del out[text], names[text]
    return out, names


def _schema(names: list[str], arrays: list[pa.Array]) -> pa.Schema:
    return pa.schema([pa.field(n, a.type) for n, a in zip(names, arrays, strict=True)])


def _key_and_event_time(
    parsed: Parsed, n: int, key: str | None, event_only: Typing, tokens: np.ndarray | None
) -> list[pa.Array]:
    """The key's text (with ``tokens``: its part's token) and the event time of each line
    that parses; null for the others."""
    at = pa.array(parsed.row_at if parsed.row_at is not None else np.arange(parsed.rows.num_rows))
    wanted = [key, event_only.event_column] if tokens is not None else [event_only.event_column]
    typed, _ = event_only.apply(parsed.rows.select(list(dict.fromkeys(wanted))))
    if tokens is not None:
        part = native.key_partitions(key_text(typed.column(key)), len(tokens))
        # A null key's record goes to a random partition: its row to part 0.
        keys, kind = pa.array(tokens[np.maximum(part, 0)]), pa.int32()
    else:
        keys = parsed.rows.column(key) if key else pa.nulls(parsed.rows.num_rows, pa.string())
        kind = pa.string()
    micros = typed.column(EVENT_TS_COL).cast(TS_TYPE).cast(pa.int64())
    return [_scatter(keys, at, n, kind), _scatter(micros, at, n, pa.int64())]


def _scatter(values: pa.Array, at: pa.Array, n: int, type_: pa.DataType) -> pa.Array:
    """``values`` placed at positions ``at`` of an array of ``n``, null elsewhere."""
    if len(at) == n:
        return values.cast(type_)
    where = np.full(n, -1, dtype=np.int64)
    where[np.asarray(at)] = np.arange(len(at))
    return values.cast(type_).take(pa.array(where, mask=where < 0))


def by_line(df: DataFrame, parts: int) -> DataFrame:
    """Marked lines in ``parts`` parts, each line's part a hash of its text (moved by its
    offset, of its file and offset)."""
    if LINE_COL in df.columns:
        return df.repartition(parts, F.col(LINE_COL))
    return df.repartition(parts, F.col(FILE_COL), F.col(LINE_AT_COL))


def by_key_in_event_time_order(df: DataFrame, parts: int) -> DataFrame:
    """Marked lines in ``parts`` parts by their key (their part's token, or a hash of the
    key's text), each part in event-time order."""
    return in_event_time_order(df.repartition(parts, F.col(PART_COL if PART_COL in df.columns else KEY_COL)))


def places_in_event_time_order(
    sc: SparkContext, handed: list[pa.RecordBatch], mark: Marking, parts: int, rows_per_batch: int
) -> RDD:
    """An ordered replay's places (the tasks ``handed`` their splits, ``mark`` marking each
    line with its part's token) in ``parts`` parts, each in event-time order, ties in file
    order: the rows :func:`by_key_in_event_time_order` gives, in batches of
    ``rows_per_batch``, with Spark's shuffle moving bytes only.

    Spark's own shuffle and sort of the marks cost its JVM about 1.7 µs a row (the
    marks turned into its rows, serialised, read back, sorted and written into Arrow
    batches, per row): about as much CPU as the sending stage's Python workers spend
    parsing and encoding a row. Here each scan task's marks go as Arrow bytes, a part's
    marks at a time, and each sending task sorts its part's marks in Arrow's C++. The
    task holds them all in memory (about 30 bytes a line, 64 at the sort's peak): the run
    takes this path only where the whole input is small enough (:data:`PYTHON_SORT_BYTES`),
    as one key may put most of it in one part."""
    tokens = part_tokens(parts)
    part_of = np.full(int(tokens.max()) + 1, -1, dtype=np.int64)
    part_of[tokens] = np.arange(parts)
    unparsed = SPARK_HASH_SEED % parts  # a line that does not parse has no token: Spark hashes a null to the seed

    def by_part(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, bytes]]:
        for batch in mark(batches):
            token = batch.column(PART_COL)
            part = np.where(token.is_null(), unparsed, part_of[np.asarray(token.fill_null(0))])
            if len(part) and part.min() < 0:  # a token of no part: the row would go nowhere
                raise ValueError(f"a marked line's part token is not one of the {parts} parts' tokens")
            rows = batch.drop_columns([PART_COL])
            for p in np.unique(part):
                yield int(p), _ipc(rows.filter(pa.array(part == p)))

    def in_order(pairs: Iterator[tuple[int, bytes]]) -> Iterator[pa.RecordBatch]:
        marks = [pa.ipc.open_stream(blob).read_all() for _, blob in pairs]
        if not marks:
            return
        table = pa.concat_tables(marks).combine_chunks()
        del marks  # the blobs: at most the marks twice over, and the sort's copy, at once
        keys = [(EVENT_US_COL, "ascending"), (MARK_COL, "ascending")]  # a mark's bytes sort in file order
        table = table.take(pc.sort_indices(table, sort_keys=keys, null_placement="at_start"))
        yield from table.to_batches(max_chunksize=rows_per_batch)

    with _call_site_kept():
        moved = sc.parallelize(handed, len(handed)).mapPartitions(by_part).partitionBy(parts, _itself)
    return moved.mapPartitions(in_order)


@contextmanager
def _call_site_kept() -> Iterator[None]:
    """RDDs made inside keep the call site their caller set (its name for the map stage,
    ``callSite.short``); PySpark would name them by the Python line that made them."""
    from pyspark.traceback_utils import SCCallSiteSync

    SCCallSiteSync._spark_stack_depth += 1  # as inside a PySpark call: it leaves the call site alone
    try:
        yield
    finally:
        SCCallSiteSync._spark_stack_depth -= 1


# The input up to which an ordered replay's sending tasks sort their marks in memory (8
# million lines of 128 bytes: 540 MB at the sort's peak, were they all one part's); beyond,
# Spark's sort, which spills to disk.
PYTHON_SORT_BYTES = 1 << 30


SPARK_HASH_SEED = 42  # of Spark's hash(), which leaves it as it is for a null


def _itself(part: int) -> int:
    return part


def _ipc(batch: pa.RecordBatch) -> bytes:
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, batch.schema) as writer:
        writer.write_batch(batch)
    return out.getvalue().to_pybytes()


def in_event_time_order(df: DataFrame) -> DataFrame:
    """Each task's marked lines in event-time order, ties in file order (a line's mark sorts
    so); the key, once the lines are parted by it, dropped before the sort copies it."""
    df = df.drop(KEY_COL, PART_COL)
    if MARK_COL in df.columns:
        return df.sortWithinPartitions(F.col(EVENT_US_COL), F.col(MARK_COL))
    return df.sortWithinPartitions(F.col(EVENT_US_COL), F.col(FILE_COL), F.col(BLOCK_COL), F.col(LINE_NO_COL))


@cache
def part_tokens(parts: int) -> np.ndarray:
    """For each part ``d`` of ``parts``, the least int ≥ 0 that Spark's hash partitioning
    over ``parts`` (pmod of its murmur3, seed 42, of the int) puts in part ``d``: a shuffle
    by a column of these puts each row in the part its token names."""
    tokens = np.full(parts, -1, dtype=np.int32)
    missing, v = parts, 0
    while missing:
        d = _spark_hash_int(v) % parts
        if tokens[d] < 0:
            tokens[d], missing = v, missing - 1
        v += 1
    tokens.flags.writeable = False  # shared: the cache hands every caller this array
    return tokens


def _spark_hash_int(v: int) -> int:
    """Spark's ``Murmur3_x86_32.hashInt(v, SPARK_HASH_SEED)`` (``hash()`` of an int column), signed."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return (x << r | x >> (32 - r)) & mask

    k = rotl(v * 0xCC9E2D51 & mask, 15) * 0x1B873593 & mask
    h = (rotl(SPARK_HASH_SEED ^ k, 13) * 5 + 0xE6546B64) & mask
    h ^= 4
    h = (h ^ h >> 16) * 0x85EBCA6B & mask
    h = (h ^ h >> 13) * 0xC2B2AE35 & mask
    h ^= h >> 16
    return h - (1 << 32) if h >> 31 else h


def after_shuffle(parser: LineParser) -> LineParser:
    """The sink's parser for marked lines (moved by their offsets where the scan's tasks
    read their splits: the sink's tasks read the lines back, so the parser still
    ``reads_splits``)."""
    return replace(parser, marked=True)
