"""From what the source hands each task to clean rows and quarantined ones, per Arrow batch.

Two parsers, one result (:class:`Parsed`). Files may have different headers (schema
drift): each parser knows every file's :class:`Layout` and keys a file's rows by its own
header; a batch holds rows of one file (one ledger unit).

- :class:`LineParser`, the fast path: Spark reads raw lines (``read.text``) and each batch
  of lines is parsed here by Arrow's C++ CSV reader, so no Python object is made per row.
  It handles RFC 4180 quoting on single-line records in UTF-8 (or a single-byte encoding
  or UTF-16, turned into UTF-8 first); a line is quarantined if its bytes are not valid in the
  encoding, its quotes do not balance (a quoted newline without ``--multiline``), or its
  field count differs from the header's. Each file's first line is its header (checked
  against the one read for that file before the run) or, without a header, data (BOM
  removed); after a shuffle, the line marked first.
- :class:`RowParser`: Spark's CSV reader has parsed the rows already (multiline records,
  backslash escapes); its reject marks are only split off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Protocol

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from kappa_ingest.source import transcode
from kappa_ingest.source.columns import (
    BLOCK_COL,
    BLOCK_LEN_COL,
    CORRUPT_COL,
    EVENT_TS_COL,
    FILE_COL,
    FIRST_COL,
    LINE_COL,
    REJECT_COL,
)
from kappa_ingest.source.line_places import Split
from kappa_ingest.source.typed import Typing

BOM = "\ufeff"
REJECT_SCHEMA = pa.schema([("source_file", pa.string()), ("reason", pa.string()), ("line", pa.string())])
REJECT_DDL = "source_file string, reason string, line string"
REASON_MALFORMED = "malformed"  # Spark's mark; made precise by malformed_detail


class BatchParser(Protocol):
    counts_lines: bool  # whether a batch position is a line of the file
    reads_splits: bool  # handed its splits, the task reads their lines itself (kappa_ingest.source.split_reader)
    encoding: str  # of the lines it is handed or reads
    store: Any  # where the objects it reads are (source.opening.Store); None: local files
    splits: tuple[Split, ...]  # the run's, numbered, where its lines name theirs so

    def fresh(self) -> BatchParser:
        """A parser for a new task."""

    def __call__(self, batch: pa.RecordBatch) -> Parsed: ...


class Wrapping:
    """A parser around another (``inner``), which reads the task's lines: what it is
    handed and how it reads them are the inner parser's."""

    inner: BatchParser

    @property
    def counts_lines(self) -> bool:
        return self.inner.counts_lines

    @property
    def reads_splits(self) -> bool:
        return self.inner.reads_splits

    @property
    def encoding(self) -> str:
        return self.inner.encoding

    @property
    def store(self) -> Any:
        return self.inner.store

    @property
    def splits(self) -> tuple[Split, ...]:
        return self.inner.splits


class HeaderMismatch(ValueError):
    """A file's header differs from the one read for it when the run was planned."""


@dataclass(frozen=True)
class Layout:
    """One file's columns, and its header line (BOM removed; None: no header line)."""

    columns: tuple[str, ...]
    header_line: str | None = None


def layout_for(by_file: dict[str, Layout], default: Layout, files: pa.Array) -> Layout:
    """The layout of the file of a batch's rows (a batch holds one file's rows)."""
    if not by_file or len(files) == 0:
        return default
    from kappa_ingest.source.splits import canonical_file

    return by_file.get(canonical_file(files[0].as_py()), default)


@dataclass
class Parsed:
    """One batch, parsed: clean rows (CSV columns + FILE_COL), rejects (REJECT_SCHEMA),
    and the lines that are not rows (headers, blank lines)."""

    rows: pa.RecordBatch
    rejects: pa.RecordBatch
    skipped: int = 0
    reject_at: np.ndarray | None = None  # each reject's position in the batch (its line, or Spark's record)
    columns: tuple[str, ...] = ()  # the rows' CSV columns, in their file's header order
    row_at: np.ndarray | None = None  # each clean row's position in the batch
    failed: dict[str, int] | None = None  # rows failing each row-level expectation (--expectations)

    @property
    def rows_read(self) -> int:
        return self.rows.num_rows + self.rejects.num_rows


def reject_batch(files: pa.Array, reasons: pa.Array, lines: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([files, reasons, lines], schema=REJECT_SCHEMA)


def no_rejects() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=REJECT_SCHEMA)


def _invalid_utf8(lines: pa.Array) -> np.ndarray:
    """Which lines are not UTF-8: one C++ pass over the batch; per line only if that fails."""
    try:
        lines.view(pa.string() if pa.types.is_binary(lines.type) else pa.large_string()).validate(full=True)
        return np.zeros(len(lines), dtype=bool)
    except pa.ArrowInvalid:
        return np.array([not _is_utf8(b) for b in lines.to_pylist()], dtype=bool)


def _is_utf8(b: bytes | None) -> bool:
    try:
        b is None or b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _count_byte(lines: pa.Array, byte: bytes) -> np.ndarray:
    """How often ``byte`` occurs in each line: one vectorised pass over the data buffer
    (Arrow's count_substring searches line by line, ~6x slower)."""
    if len(byte) != 1:
        return np.asarray(pc.count_substring(lines, byte.decode()).fill_null(0))
    _, offsets, data = lines.buffers()
    width = 8 if pa.types.is_large_binary(lines.type) else 4
    bounds = np.frombuffer(offsets, dtype=np.int64 if width == 8 else np.int32, count=len(lines) + 1,
                           offset=width * lines.offset)  # fmt: skip
    if data is None or bounds[-1] == bounds[0]:
        return np.zeros(len(lines), dtype=np.int64)
    text = np.frombuffer(data, dtype=np.uint8)[bounds[0] : bounds[-1]]
    found = np.flatnonzero(text == byte[0]) + bounds[0]
    return np.diff(np.searchsorted(found, bounds))


def _as_binary(arr: pa.Array) -> pa.Array:
    if pa.types.is_string(arr.type):
        return arr.view(pa.binary())
    if pa.types.is_large_string(arr.type):
        return arr.view(pa.large_binary())
    return arr


@dataclass
class LineParser:
    """Parses batches of raw lines for one task; remembers which files' headers it has seen."""

    columns: tuple[str, ...]
    delimiter: str = ","
    quote: str = '"'
    header_line: str | None = None  # the header (BOM removed) of files not in by_file; None: no header
    by_file: dict[str, Layout] = field(default_factory=dict)  # canonical file -> its layout
    # Lines moved by a shuffle (kappa_ingest.source.line_shuffle): each file's first line is the
    # one marked so (FIRST_COL), checked when it was marked; a position is not a line.
    marked: bool = False
    wanted: tuple[str, ...] = ()  # only these columns' values (the others are split, not kept); (): all
    encoding: str = "utf-8"  # else a single-byte one or UTF-16, turned into UTF-8 first (kappa_ingest.source.transcode)
    reads_splits: bool = False  # the task is handed its splits and reads their lines (kappa_ingest.source.split_reader)
    store: Any = None  # where its objects are (source.opening.Store), when the inputs are in a store
    # The run's splits, numbered: an ordered replay's lines name theirs by number (source.line_places).
    splits: tuple[Split, ...] = field(default=(), repr=False)
    _seen: set[str] = field(default_factory=set)

    @property
    def counts_lines(self) -> bool:
        """Whether a batch position is a line of the file (headers and blank lines included)."""
        return not self.marked

    def fresh(self) -> LineParser:
        """A parser for a new task (no file seen yet)."""
        return replace(self, _seen=set())

    # Long: the hot path of a batch; split up, its steps would pass half a dozen arrays around.
    def __call__(self, batch: pa.RecordBatch) -> Parsed:
        lines = _as_binary(batch.column(LINE_COL))
        undefined = None
        if transcode.wide(self.encoding):
            lines, undefined = transcode.utf16_to_utf8(lines, _big_endian(self.encoding, batch.column(FILE_COL)))
        elif self.encoding != "utf-8":
            byte_table = transcode.table(self.encoding)
            assert byte_table is not None, self.encoding
            lines, undefined = transcode.to_utf8(lines, byte_table)
        files = batch.column(FILE_COL)
        layout = layout_for(self.by_file, Layout(self.columns, self.header_line), files)
        columns = layout.columns
        n = len(lines)
        keep = np.ones(n, dtype=bool)
        skipped = 0
        if self.marked:
            lines, skipped = self._marked_first_lines(lines, batch.column(FIRST_COL), keep, layout.header_line)
        else:
            lines, skipped = self._first_lines(lines, files, batch.column(BLOCK_COL), keep, layout.header_line)
        blank = np.asarray(pc.equal(pc.binary_length(lines), 0).fill_null(False))
        skipped += int((blank & keep).sum())
        keep &= ~blank

        reasons: list[tuple[np.ndarray, str]] = []
        if undefined is None:
            invalid = _invalid_utf8(lines) & keep
            reason = "bytes not valid in utf-8"
        else:  # worded as Spark's CSV reader has it (csv_source.reject_reason)
            invalid = undefined & keep
            reason = f"bytes not valid in {self.encoding} (decoded as U+FFFD)"
        if invalid.any():
            reasons.append((invalid, reason))
            keep &= ~invalid
        quotes = _count_byte(lines, self.quote.encode())
        odd = (quotes % 2 == 1) & keep
        if odd.any():
            reasons.append((odd, "unbalanced quotes (a quoted field with a newline needs --multiline)"))
            keep &= ~odd

        idx = np.flatnonzero(keep)
        if len(idx) == n:  # the common batch: every line kept, none copied
            good_lines = lines.view(pa.string())
        else:
            good_lines = lines.take(pa.array(idx)).view(pa.string()) if len(idx) else pa.array([], pa.string())
        kept = self.wanted or columns
        table, bad = self._parse(good_lines, columns, kept)
        last = good_lines.slice(len(good_lines) - 1) if len(good_lines) else good_lines
        if table.num_rows + len(bad) != len(good_lines) or _open_quoted(last, self.delimiter, self.quote).any():
            # Arrow's reader ran a quoted field left open (an even count of quotes, one of them
            # inside a field: 1,a"b,"c) on into the next lines (or, the batch's last, to its
            # end): such lines out, the rest parsed again.
            open_quote = np.zeros(n, dtype=bool)
            open_quote[idx[_open_quoted(good_lines, self.delimiter, self.quote)]] = True
            reasons.append((open_quote, "a quoted field not closed on its line (one with a newline needs --multiline)"))
            keep &= ~open_quote
            idx = np.flatnonzero(keep)
            good_lines = lines.take(pa.array(idx)).view(pa.string()) if len(idx) else pa.array([], pa.string())
            table, bad = self._parse(good_lines, columns, kept)
        if bad:
            # Group by field count: each count is its own reason.
            by_count: dict[int, list[int]] = {}
            for row_number, actual in bad:
                by_count.setdefault(actual, []).append(idx[row_number - 1])
            for actual, positions in by_count.items():
                mask = np.zeros(n, dtype=bool)
                mask[positions] = True
                reasons.append((mask, f"{actual} fields where the header has {len(columns)}"))
                keep &= ~mask
            idx = np.flatnonzero(keep)
        rows = pa.RecordBatch.from_arrays(
            [*(_plain(table.column(c)) for c in kept), files if len(idx) == n else files.take(pa.array(idx))],
            names=[*kept, FILE_COL],
        )
        at = np.concatenate([np.flatnonzero(mask) for mask, _ in reasons]) if reasons else None
        return Parsed(rows, self._reject_batch(reasons, files, lines), skipped, at, kept, idx)

    def _first_lines(
        self, lines: pa.Array, files: pa.Array, blocks: pa.Array, keep: np.ndarray, header_line: str | None
    ) -> tuple[pa.Array, int]:
        """Drop (and check) each file's header; take the BOM off a header-less first line."""
        at_start = np.asarray(pc.equal(blocks, 0).fill_null(False))
        if not at_start.any():
            return lines, 0
        encoded = files.dictionary_encode()
        names = encoded.dictionary.to_pylist()
        codes = np.asarray(encoded.indices)
        skipped = 0
        replaced: dict[int, bytes] = {}
        candidates = np.flatnonzero(at_start)
        _, first = np.unique(codes[candidates], return_index=True)
        for pos in candidates[first]:
            name = names[codes[pos]]
            if name in self._seen:
                continue
            self._seen.add(name)
            raw = lines[int(pos)].as_py()
            line = raw.decode("utf-8", errors="replace").removeprefix(BOM)
            if header_line is not None:
                if line != header_line:
                    raise HeaderMismatch(
                        f"the header of {name} ({line[:80]!r}) differs from the one read when the run began"
                        f" ({header_line[:80]!r}): the file changed during the run; run again"
                    )
                keep[pos] = False
                skipped += 1
            elif raw.startswith(BOM.encode()):
                replaced[int(pos)] = raw[len(BOM.encode()) :]
        return _replaced(lines, replaced), skipped

    @staticmethod
    def _marked_first_lines(
        lines: pa.Array, first: pa.Array, keep: np.ndarray, header_line: str | None
    ) -> tuple[pa.Array, int]:
        """Drop the headers marked before a shuffle (checked then); take the BOM off a
        header-less file's first line."""
        at = np.flatnonzero(np.asarray(first.fill_null(False)))
        if header_line is not None:
            keep[at] = False
            return lines, len(at)
        bom = BOM.encode()
        return _replaced(lines, {int(p): lines[int(p)].as_py()[len(bom) :] for p in at
                                 if lines[int(p)].as_py().startswith(bom)}), 0  # fmt: skip

    def _parse(
        self, lines: pa.Array, columns: tuple[str, ...], kept: tuple[str, ...]
    ) -> tuple[pa.Table, list[tuple[int, int]]]:
        """The lines' fields as Arrow's CSV reader reads them (split in C where the lines are
        of the plain forms, c/fields.c); rows of another width are reported by their 1-based
        number and field count instead of being parsed."""
        unique = len(set(columns)) == len(columns) and len(set(kept)) == len(kept)
        if len(lines) and unique and set(kept) <= set(columns):
            split = _split_in_c(lines, columns, kept, self.delimiter, self.quote)
            if split is not None:
                arrays, bad = split
                return pa.Table.from_arrays(arrays, names=list(kept)), bad
        return self._parse_in_arrow(lines, columns, kept)

    def _parse_in_arrow(
        self, lines: pa.Array, columns: tuple[str, ...], kept: tuple[str, ...]
    ) -> tuple[pa.Table, list[tuple[int, int]]]:
        """Arrow's CSV reader over the lines joined by newlines."""
        bad: list[tuple[int, int]] = []

        def on_invalid(row: pcsv.InvalidRow) -> str:
            bad.append((row.number, row.actual_columns))
            return "skip"

        if len(lines) == 0:
            return pa.table({c: pa.array([], pa.string()) for c in kept}), bad
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines), "\n")
        size = pc.binary_length(joined)[0].as_py()
        table = pcsv.read_csv(
            pa.BufferReader(joined.buffers()[2].slice(0, size)),
            read_options=pcsv.ReadOptions(column_names=list(columns), use_threads=False, block_size=1 << 30),
            parse_options=pcsv.ParseOptions(
                delimiter=self.delimiter,
                quote_char=self.quote,
                double_quote=True,
                newlines_in_values=False,
                ignore_empty_lines=False,
                invalid_row_handler=on_invalid,
            ),
            convert_options=pcsv.ConvertOptions(
                column_types={c: pa.string() for c in kept},
                include_columns=list(kept),
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
                check_utf8=False,
            ),
        )
        return table, bad

    def _reject_batch(self, reasons: list[tuple[np.ndarray, str]], files: pa.Array, lines: pa.Array) -> pa.RecordBatch:
        if not reasons:
            return no_rejects()
        parts = []
        for mask, reason in reasons:
            pos = pa.array(np.flatnonzero(mask))
            # Rejects are few: their text is made per line, undecodable bytes escaped.
            text = [b.decode("utf-8", errors="backslashreplace") for b in lines.take(pos).to_pylist()]
            parts.append(
                reject_batch(files.take(pos), pa.array([reason] * len(pos), pa.string()), pa.array(text, pa.string()))
            )
        return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]


def _split_in_c(
    lines: pa.Array, columns: tuple[str, ...], kept: tuple[str, ...], delimiter: str, quote: str
) -> tuple[list[pa.Array], list[tuple[int, int]]] | None:
    """:func:`kappa_ingest.native.split_fields` for these columns; None where it leaves
    the batch to Arrow, or the C loops are unavailable."""
    from kappa_ingest import native

    slot = {c: i for i, c in enumerate(kept)}
    try:
        return native.split_fields(lines, len(columns), [slot.get(c, -1) for c in columns],
                                   delimiter.encode(), quote.encode())  # fmt: skip
    except native.NativeUnavailable:
        return None


def _open_quoted(lines: pa.Array, delimiter: str, quote: str) -> np.ndarray:
    """Which lines end inside a quoted field, read as Arrow's CSV reader reads a field: a
    quote opens one only at the field's start, a doubled quote inside it is a quote (taken
    greedily, as the reader takes it: never a close and a reopen), and after its closing
    quote the field runs on to the delimiter. (Per line in Python: a batch's last line, and
    all of a batch where Arrow's rows did not come out one per line.)"""
    whole = _whole_line(delimiter, quote)
    return np.array([whole.fullmatch(line) is None for line in lines.view(pa.binary()).to_pylist()], dtype=bool)


@cache
def _whole_line(delimiter: str, quote: str) -> re.Pattern[bytes]:
    """A line whose every quoted part is closed, as a pattern (:func:`_open_quoted`)."""
    d, q = re.escape(delimiter.encode()), re.escape(quote.encode())
    field_ = rb"(?:%s(?:[^%s]|%s%s)*+%s[^%s]*|(?:[^%s%s][^%s]*)?)" % (q, q, q, q, q, d, d, q, d)
    return re.compile(rb"%s(?:%s%s)*" % (field_, d, field_), re.DOTALL)


def _replaced(lines: pa.Array, values_at: dict[int, bytes]) -> pa.Array:
    """``lines`` with the few lines at the given positions replaced."""
    if not values_at:
        return lines
    values = lines.to_pylist()
    for pos, value in values_at.items():
        values[pos] = value
    return pa.array(values, type=lines.type)


def _plain(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):  # (combining copies even one chunk)
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col if len(col) else pa.array([], pa.string())


@dataclass
class RowParser:
    """For rows Spark's CSV reader parsed: split off those it marked (REJECT_COL). With
    files of several headers, Spark's rows have every header's columns (null where the
    row's file has no such column): each file's rows keep only its own."""

    counts_lines = False  # a batch position is one of Spark's records (a header is not one; a record may span lines)
    reads_splits = False
    encoding = "utf-8"  # (Spark's reader decoded the rows)
    store = None
    splits = ()

    columns: tuple[str, ...]
    delimiter: str = ","
    quote: str = '"'
    by_file: dict[str, Layout] = field(default_factory=dict)  # canonical file -> its layout

    def fresh(self) -> RowParser:
        return self

    def __call__(self, batch: pa.RecordBatch) -> Parsed:
        reject = batch.column(REJECT_COL)
        columns = layout_for(self.by_file, Layout(self.columns), batch.column(FILE_COL)).columns
        keep_cols = [
            *columns,
            *(c for c in (FILE_COL, EVENT_TS_COL, BLOCK_COL, BLOCK_LEN_COL) if c in batch.schema.names),
        ]
        if reject.null_count == len(reject):
            return Parsed(batch.select(keep_cols), no_rejects(), columns=columns, row_at=np.arange(batch.num_rows))
        bad = pc.is_valid(reject)
        rows = batch.filter(pc.invert(bad)).select(keep_cols)
        rejected = batch.filter(bad)
        reasons = [
            malformed_detail(line, len(columns), self.delimiter, self.quote) if r == REASON_MALFORMED else r
            for r, line in zip(
                rejected.column(REJECT_COL).to_pylist(), rejected.column(CORRUPT_COL).to_pylist(), strict=False
            )
        ]
        lines = rejected.column(CORRUPT_COL)
        if lines.null_count:  # not malformed, so no raw text: keep the parsed fields
            fields = pl.from_arrow(rejected.select(list(columns))).select(pl.struct(pl.all()).struct.json_encode())
            lines = pc.coalesce(lines, fields.to_series().to_arrow().cast(pa.string()))
        marked = np.asarray(bad.fill_null(False))
        return Parsed(rows, reject_batch(rejected.column(FILE_COL), pa.array(reasons, pa.string()), lines), 0,
                      np.flatnonzero(marked), columns, np.flatnonzero(~marked))  # fmt: skip


def move_to_rejects(parsed: Parsed, batch: pa.RecordBatch, bad: np.ndarray, reasons: list[str]) -> Parsed:
    """``parsed`` with its clean rows where ``bad`` is set moved to the rejects, with
    ``reasons`` (one per such row) and their text: the line as read where the batch has
    lines, else the fields Spark parsed, as JSON."""
    import json

    rows = parsed.rows
    at = parsed.row_at[bad] if parsed.row_at is not None else np.flatnonzero(bad)
    if LINE_COL in batch.schema.names:
        lines = batch.column(LINE_COL).take(pa.array(at)).cast(pa.binary()).to_pylist()
        text = [b.decode("utf-8", errors="backslashreplace") for b in lines]
    else:
        picked = batch.take(pa.array(at)).select(list(parsed.columns))
        text = [json.dumps(r, default=str, ensure_ascii=False) for r in picked.to_pylist()]
    moved = reject_batch(rows.column(FILE_COL).filter(pa.array(bad)), pa.array(reasons, pa.string()),
                         pa.array(text, pa.string()))  # fmt: skip
    rejects = pa.Table.from_batches([parsed.rejects, moved]).combine_chunks().to_batches()[0]
    before = parsed.reject_at if parsed.reject_at is not None else np.arange(0)
    keep = pa.array(~bad)
    row_at = parsed.row_at[~bad] if parsed.row_at is not None else None
    return Parsed(rows.filter(keep), rejects, parsed.skipped, np.concatenate([before, at]), parsed.columns, row_at,
                  parsed.failed)  # fmt: skip


@dataclass
class Typed(Wrapping):
    """A parser whose clean rows get their typed values (:mod:`kappa_ingest.source.typed`): a row
    with a field that does not convert is moved to the rejects, the reason naming the first
    such column and its value."""

    inner: BatchParser
    typing: Typing

    def fresh(self) -> Typed:
        return Typed(self.inner.fresh(), self.typing)

    def __call__(self, batch: pa.RecordBatch) -> Parsed:
        parsed = self.inner(batch)
        rows, failures = self.typing.apply(parsed.rows)
        parsed.rows = rows
        if not failures:
            return parsed
        reason = np.full(rows.num_rows, None, dtype=object)
        for mask, why in failures:
            at = np.flatnonzero(mask)
            free = reason[at] == None  # noqa: E711 - numpy's elementwise comparison
            reason[at[free]] = np.asarray(why, dtype=object)[free]
        bad = reason != None  # noqa: E711
        return move_to_rejects(parsed, batch, bad, list(reason[bad]))


def malformed_detail(line: str | None, header_fields: int, delimiter: str, quote: str) -> str:
    """A malformed row's reason for people: its field count against the header's."""
    import csv
    import io

    if line is None:
        return REASON_MALFORMED
    try:
        row = next(csv.reader(io.StringIO(line), delimiter=delimiter, quotechar=quote), [])
    except csv.Error:
        return "unbalanced quotes"
    if len(row) != header_fields:
        return f"{len(row)} fields where the header has {header_fields}"
    return "a value does not fit --schema"


def _big_endian(encoding: str, files: pa.Array) -> np.ndarray:
    """Per line, whether its UTF-16 file is big-endian (the files are read by the task)."""
    encoded = files.dictionary_encode()
    big = [transcode.byte_order(encoding, u) == ">" for u in encoded.dictionary.to_pylist()]
    return np.array(big, dtype=bool)[np.asarray(encoded.indices)] if len(files) else np.zeros(0, dtype=bool)
