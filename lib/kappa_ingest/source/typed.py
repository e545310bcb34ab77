"""Typed values, pure: ``--schema``, ``--null-value`` and ``--event-time-column`` applied
to parsed text rows, one Arrow batch at a time.

Every read path hands this module the fields' text (the line path's Arrow parse and
Spark's CSV reader alike), so a value means the same whichever path read it. A field
equal to a null token (or empty) is null; a typed field is converted by the rules below,
and a row with a field that does not convert is quarantined, its reason naming the
column and the value (``arr_delay: 'NA' is not a DOUBLE``):

- TINYINT, SMALLINT, INT, BIGINT: an optional sign and digits, within the type's range;
- FLOAT, DOUBLE: a decimal or exponent number, or NaN / Infinity / inf (null in JSON,
  which has no such numbers);
- DECIMAL(p,s): a number, rounded half-up to ``s`` places, at most ``p`` digits;
- BOOLEAN: true or false, in any case;
- DATE: ``yyyy-MM-dd``; TIMESTAMP (and event time without a format): ISO-8601,
  ``yyyy-MM-dd[( |T)HH:mm[:ss[.fraction]]][Z|±HH[:]mm]``, UTC where no offset is given;
- event time with ``--event-time-format``: that Spark datetime pattern (the common
  letters: y M d H h m s S a E X x Z and quoted text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from kappa_ingest.errors import UsageError
from kappa_ingest.source.columns import EVENT_TS_COL, PREFIX

_INTS = {"tinyint": pl.Int8, "smallint": pl.Int16, "int": pl.Int32, "bigint": pl.Int64}
_FLOATS = {"float": pl.Float32, "double": pl.Float64}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
_OTHERS = {"boolean", "date", "timestamp", "string"}
_TIME = r"[ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?"
_OFFSET = r"(Z|[+-]\d{2}(:?\d{2})?)"
_ISO = r"^\d{4}-\d{2}-\d{2}(" + _TIME + _OFFSET + "?)?$"
_ZONED = _TIME + _OFFSET + "$"
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
TS_TYPE = pa.timestamp("us", tz="UTC")
# A typed column whose every field is already written as the JSON literal of its value
# ("true", "42", "50.125": c/json.c's kj_not_literal) stays text, its field tagged with its
# type under this key: the records copy the text, neither parsed nor formatted (a third
# of a wide table's CPU otherwise); materialized() gives the typed values where needed.
LITERAL = b"kappa.literal"
EVENT_TEXT = b"kappa.event_text"  # on EVENT_TS_COL: the column whose text is its ISO literal


def supported(simple: str) -> bool:
    """Whether a Spark type (its ``simpleString``) can be a ``--schema`` column's."""
    return simple in _INTS or simple in _FLOATS or simple in _OTHERS or bool(_DECIMAL.fullmatch(simple))


def type_name(simple: str) -> str:
    """The type as a reason names it: INT, DECIMAL(10,2), ..."""
    return simple.upper()


@dataclass(frozen=True)
class Typing:
    """What turns a file's text fields into the record's values."""

    types: tuple[tuple[str, str], ...] = ()  # (column, Spark simpleString) of the typed columns
    null_values: tuple[str, ...] = ()  # besides the empty field
    event_column: str | None = None
    event_format: str | None = None  # a Spark datetime pattern; None: ISO-8601

    def __post_init__(self) -> None:
        for column, simple in self.types:
            if not supported(simple):
                raise UsageError(f"--schema: column {column!r} has type {simple.upper()}, which kappa-ingest cannot"
                                 " write as JSON; use INT, BIGINT, DOUBLE, DECIMAL(p,s), BOOLEAN, DATE, TIMESTAMP"
                                 " or STRING")  # fmt: skip
        if self.event_format is not None:
            chrono_format(self.event_format)  # a usage error now, not on the executors

    @property
    def active(self) -> bool:
        return bool(self.types or self.null_values or self.event_column)

    def apply(self, rows: pa.RecordBatch) -> tuple[pa.RecordBatch, list[tuple[np.ndarray, list[str]]]]:
        """The rows with their typed columns (and EVENT_TS_COL); and, per column whose
        fields did not convert, ``(mask of those rows, a reason for each)``."""
        names = rows.schema.names
        arrays = dict(zip(names, rows.columns, strict=True))
        tokens = pa.array(list(self.null_values), pa.string()) if self.null_values else None
        failures: list[tuple[np.ndarray, list[str]]] = []
        types = dict(self.types)
        literal: dict[str, str] = {}  # typed columns kept as their text (see LITERAL)
        for name in names:
            if name.startswith(PREFIX):  # the source's own columns
                continue
            text = arrays[name]
            if tokens is not None and (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
                text = pc.if_else(pc.is_in(text, value_set=tokens), pa.scalar(None, text.type), text)
                arrays[name] = text
            if name in types:
                if _already_literal(text, types[name]):
                    literal[name] = types[name]
                    continue
                typed, failed = convert(text, types[name])
                arrays[name] = typed
                if failed.any():
                    failures.append(
                        (failed, _reasons(text, failed, f"{name}: ", f"is not {_a(type_name(types[name]))}"))
                    )
        if self.event_column is not None:
            source = arrays[self.event_column]
            if pa.types.is_timestamp(source.type):
                stamps, failed = source, np.zeros(len(source), dtype=bool)
            elif self.event_format is None and _already_literal(source, "timestamp"):
                stamps, failed = source.cast(TS_TYPE), np.zeros(len(source), dtype=bool)
                literal[EVENT_TS_COL] = self.event_column  # its text is the record's event_ts
            else:
                stamps, failed = event_times(source, self.event_format)
            empty = np.asarray(pc.is_null(source))
            if empty.any():
                failures.append((empty, [f"{self.event_column}: empty, and it is the event time"] * int(empty.sum())))
            failed &= ~empty
            if failed.any():
                fmt = f" in format {self.event_format!r}" if self.event_format else ""
                failures.append(
                    (failed, _reasons(source, failed, f"{self.event_column}: ", f"is not a timestamp{fmt}"))
                )
            arrays[EVENT_TS_COL] = stamps
        fields = [pa.field(n, a.type, metadata=_tag(n, literal)) for n, a in arrays.items()]
        return pa.RecordBatch.from_arrays(list(arrays.values()), schema=pa.schema(fields)), failures


def _tag(name: str, literal: dict[str, str]) -> dict[bytes, bytes] | None:
    if name not in literal:
        return None
    return {EVENT_TEXT if name == EVENT_TS_COL else LITERAL: literal[name].encode()}


def event_text(rows: pa.RecordBatch) -> pa.Array | None:
    """The event time column's text, where it is already the record's ``event_ts``."""
    meta = rows.schema.field(EVENT_TS_COL).metadata
    return rows.column(meta[EVENT_TEXT].decode()) if meta and EVENT_TEXT in meta else None


def _already_literal(text: pa.Array, simple: str) -> bool:
    from kappa_ingest import native

    if simple not in native.LITERAL_KINDS or not pa.types.is_string(text.type):
        return False
    try:
        return native.already_literal(text, simple)
    except native.NativeUnavailable:
        return False


def literal_type(field: pa.Field) -> str | None:
    """The Spark type of a typed column kept as its JSON literals' text (see LITERAL)."""
    return field.metadata[LITERAL].decode() if field.metadata and LITERAL in field.metadata else None


def materialized(rows: pa.RecordBatch) -> pa.RecordBatch:
    """The rows with every typed column in its type: what compares typed values (the
    quality checks, GX) needs; the records are written from the text."""
    if not any(literal_type(f) for f in rows.schema):
        return rows
    arrays, fields = [], []
    for f, arr in zip(rows.schema, rows.columns, strict=True):
        kind = literal_type(f)
        if kind is not None:
            arr = convert(arr, kind)[0]
            f = pa.field(f.name, arr.type)
        arrays.append(arr)
        fields.append(f)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _a(name: str) -> str:
    return f"{'an' if name[0] in 'AEIOU' else 'a'} {name}"


def _reasons(text: pa.Array, failed: np.ndarray, head: str, tail: str) -> list[str]:
    values = text.filter(pa.array(failed)).to_pylist()
    return [f"{head}{(v if len(v) <= 60 else v[:57] + '...')!r} {tail}" for v in values]


def convert(text: pa.Array, simple: str) -> tuple[pa.Array, np.ndarray]:
    """A text column in the type ``simple``, null where it did not convert; and which
    fields did not (null fields do)."""
    s = pl.from_arrow(text)
    assert isinstance(s, pl.Series)
    s = s.cast(pl.String)
    if simple in _INTS:
        out = s.cast(_INTS[simple], strict=False)
    elif simple in _FLOATS:
        out = s.cast(_FLOATS[simple], strict=False)
    elif m := _DECIMAL.fullmatch(simple):
        return _decimals(s, int(m.group(1)), int(m.group(2)))
    elif simple == "boolean":
        lower = s.str.to_lowercase()
        true, false = (lower == "true").fill_null(False).to_numpy(), (lower == "false").fill_null(False).to_numpy()
        return pa.array(true, mask=~(true | false)), s.is_not_null().to_numpy() & ~(true | false)
    elif simple == "date":
        out = s.str.to_date("%Y-%m-%d", strict=False)
    elif simple == "timestamp":
        return iso_timestamps(text)
    else:
        return text, np.zeros(len(text), dtype=bool)
    failed = (s.is_not_null() & out.is_null()).to_numpy()
    return out.to_arrow(), failed


def _decimals(s: pl.Series, precision: int, scale: int) -> tuple[pa.Array, np.ndarray]:
    """Numbers rounded half-up to ``scale`` places (polars' cast truncates: the values with
    more places, or an exponent, are rounded here), at most ``precision`` digits."""
    kind = pa.decimal128(precision, scale)
    exact = s.str.contains(r"^[+-]?\d*\.?\d{0," + str(scale) + r"}$") if scale else s.str.contains(r"^[+-]?\d+\.?$")
    out = s.cast(pl.Decimal(precision, scale), strict=False).to_arrow().cast(kind)
    failed = s.is_not_null().to_numpy() & np.asarray(pc.is_null(out))
    redo = np.flatnonzero(s.is_not_null().to_numpy() & ~exact.fill_null(True).to_numpy())
    if not len(redo):
        return out, failed
    values = out.to_pylist()
    limit = Decimal(10) ** (precision - scale)
    for i in redo:
        text = s[int(i)]
        try:
            d = Decimal(text).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
            ok = bool(_NUMBER.fullmatch(text)) and abs(d) < limit
        except (InvalidOperation, ValueError):
            ok = False
        values[i], failed[i] = (d, False) if ok else (None, True)
    return pa.array(values, kind), failed


def iso_timestamps(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """ISO-8601 times as UTC microseconds; which fields are not one."""
    text = text.cast(pa.string())
    n = len(text)
    shaped = np.asarray(pc.match_substring_regex(text, _ISO).fill_null(False))
    zoned = np.asarray(pc.match_substring_regex(text, _ZONED).fill_null(False)) & shaped
    micros = np.zeros(n, dtype=np.int64)
    valid = shaped.copy()
    for mask, kind in ((zoned, pa.timestamp("us", tz="UTC")), (shaped & ~zoned, pa.timestamp("us"))):
        at = np.flatnonzero(mask)
        if not len(at):
            continue
        picked = text.take(pa.array(at))
        try:
            stamps = pc.cast(picked, kind)
            micros[at] = np.asarray(stamps.cast(pa.int64()))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # some date is not one (Feb 30): field by field
            for i, value in zip(at, picked.to_pylist(), strict=True):
                try:
                    micros[i] = pc.cast(pa.array([value]), kind).cast(pa.int64())[0].as_py()
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    valid[i] = False
    out = pa.Array.from_buffers(TS_TYPE, n, [None, pa.py_buffer(micros.tobytes())])
    out = pc.if_else(pa.array(valid), out, pa.scalar(None, TS_TYPE))
    failed = np.asarray(pc.is_valid(text)) & ~valid
    return out, failed


def event_times(text: pa.Array, fmt: str | None) -> tuple[pa.Array, np.ndarray]:
    """The event time column as UTC microseconds, parsed by ``fmt`` (a Spark pattern) or as ISO-8601."""
    if fmt is None:
        return iso_timestamps(text)
    chrono, zoned = chrono_format(fmt)
    s = pl.from_arrow(text.cast(pa.string()))
    assert isinstance(s, pl.Series)
    parsed = s.str.to_datetime(chrono, time_unit="us", strict=False)
    parsed = parsed.dt.convert_time_zone("UTC") if zoned else parsed.dt.replace_time_zone("UTC")
    failed = (s.is_not_null() & parsed.is_null()).to_numpy()
    return parsed.to_arrow().cast(TS_TYPE), failed


# Spark datetime pattern letters (runs of them) -> chrono's strftime, for parsing.
_LETTERS = {
    "yyyy": "%Y", "yy": "%y", "y": "%Y", "MMMM": "%B", "MMM": "%b", "MM": "%m", "M": "%m", "dd": "%d", "d": "%d",
    "HH": "%H", "H": "%H", "hh": "%I", "h": "%I", "mm": "%M", "m": "%M", "ss": "%S", "s": "%S", "a": "%p",
    "EEEE": "%A", "EEE": "%a", "E": "%a", "XXX": "%:z", "XX": "%z", "X": "%#z", "xxx": "%:z", "xx": "%z",
    "Z": "%z", "ZZ": "%z", "ZZZ": "%z",
}  # fmt: skip
_ZONES = {"XXX", "XX", "X", "xxx", "xx", "Z", "ZZ", "ZZZ"}


def chrono_format(pattern: str) -> tuple[str, bool]:
    """A Spark datetime pattern as a chrono parse format, and whether it has an offset;
    UsageError naming what it cannot read."""
    out, zoned, i = [], False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise UsageError(f"--event-time-format {pattern!r}: a quote is not closed")
            out.append("'" if end == i + 1 else pattern[i + 1 : end].replace("%", "%%"))
            i = end + 1
            continue
        if not ch.isalpha():
            out.append("%%" if ch == "%" else ch)
            i += 1
            continue
        j = i
        while j < len(pattern) and pattern[j] == ch:
            j += 1
        run = pattern[i:j]
        if ch == "S":  # fractions of a second: chrono's %.f reads the dot and any digits
            if out and out[-1].endswith("."):
                out[-1] = out[-1][:-1]
            out.append("%.f")
        elif run in _LETTERS:
            out.append(_LETTERS[run])
            zoned |= run in _ZONES
        else:
            raise UsageError(
                f"--event-time-format {pattern!r}: the pattern letters {run!r} are not supported;"
                " use y M d H h m s S a E X x Z and quoted text"
            )
        i = j
    return "".join(out), zoned
