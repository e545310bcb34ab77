"""Record conversion (contract §2), pure: rows in, Kafka records out, no I/O.

The work happens on Arrow batches with polars, so no Python object is made per row:
:func:`encode_batch` turns one batch of parsed CSV rows into keys, JSON values and
timestamps. Two packagings share it, so every sink emits the same bytes:

- :func:`to_records` — a DataFrame transform (``mapInArrow``) giving Spark's Kafka sink
  schema ``key, value, timestamp, headers``; chispa-tested;
- the per-partition producers (``kappa_ingest.sinks``) call :func:`encode_batch` directly.

The clock is a parameter: ``ingest_ts`` is read once per Arrow batch (≤ 10,000 rows, a few
milliseconds of work), so rows converted together share a millisecond.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from kappa_ingest.source import typed
from kappa_ingest.source.columns import EVENT_TS_COL, FILE_COL

TIMESTAMP_HEADER = "__kappa_ts"  # read by kappa.ingest.TimestampFromHeader (interceptor.py)
KAFKA_RECORD_SCHEMA = "key binary, value binary, timestamp timestamp, headers array<struct<key:string,value:binary>>"
_ISO_MS = "%Y-%m-%dT%H:%M:%S%.3fZ"


@dataclass(frozen=True)
class RecordSpec:
    """What the conversion needs to know, beside the rows themselves."""

    columns: tuple[str, ...]  # the CSV's columns, in header order
    run_id: str
    key_column: str | None = None
    event_time: bool = False  # rows carry EVENT_TS_COL

    def with_columns(self, columns: tuple[str, ...]) -> RecordSpec:
        """The spec for rows of a file with these columns (files may differ in header);
        ``()`` keeps the spec's own."""
        if not columns or columns == self.columns:
            return self
        return RecordSpec(columns, self.run_id, self.key_column, self.event_time)


@dataclass(frozen=True)
class Encoded:
    """One batch of records ready to send; ``keys`` is None without a key column."""

    keys: pa.Array | None
    values: pa.Array
    timestamps_ms: pa.Array
    source_files: pa.Array  # each record's file (dictionary-encoded where the C encoder made the values)

    @property
    def rows(self) -> int:
        return len(self.values)

    def slice(self, start: int, stop: int) -> Encoded:
        n = stop - start
        return Encoded(
            self.keys.slice(start, n) if self.keys is not None else None,
            self.values.slice(start, n),
            self.timestamps_ms.slice(start, n),
            self.source_files.slice(start, n),
        )

    @classmethod
    def merge(cls, pieces: list[Encoded], positions: list[np.ndarray]) -> Encoded:
        """Pieces encoded apart, put back in the order of their rows' ``positions``."""
        at = np.concatenate(positions)
        in_order = bool(np.all(at[1:] > at[:-1]))  # each piece a run of the batch: joined as they are
        if in_order and len(pieces) == 1:
            return pieces[0]
        order = None if in_order else pa.array(np.argsort(at, kind="stable"))

        def joined(arrays: list[pa.Array]) -> pa.Array:
            whole = pa.concat_arrays(arrays)
            return whole if order is None else whole.take(order)

        keys = [p.keys for p in pieces]
        return cls(
            joined(keys) if all(k is not None for k in keys) else None,  # type: ignore[arg-type]
            joined([p.values for p in pieces]),
            joined([p.timestamps_ms for p in pieces]),
            joined([p.source_files for p in pieces]),
        )

    @property
    def nbytes(self) -> int:
        """Key + value bytes, as the run report counts them."""
        n = _payload_bytes(self.values)
        return n + (_payload_bytes(self.keys) if self.keys is not None else 0)


def _payload_bytes(arr: pa.Array) -> int:
    import pyarrow.compute as pc

    total = pc.sum(pc.binary_length(arr)).as_py()
    return int(total or 0)


def iso_ms(epoch_ms: int) -> str:
    """``2026-11-21T23:59:59.123Z`` for milliseconds since the epoch."""
    dt = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def _json_ready(col: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """Typed values as JSON wants them: ISO timestamps, dates as text, decimals as numbers."""
    if isinstance(dtype, pl.Datetime):
        utc = col.dt.replace_time_zone("UTC") if dtype.time_zone is None else col.dt.convert_time_zone("UTC")
        return utc.dt.to_string(_ISO_MS)
    if isinstance(dtype, pl.Date):
        return col.dt.to_string("%Y-%m-%d")
    if isinstance(dtype, pl.Decimal):
        return col.cast(pl.Float64)
    return col


def encode_batch(batch: pa.RecordBatch, spec: RecordSpec, now_ms: int) -> Encoded:
    """Encode one batch of clean rows (no rejects) into Kafka records.

    ``now_ms`` is the conversion time (``ingest_ts`` and, without event time, the record
    timestamp). Values are ``{"ingest_ts", ["event_ts",] "source_file", "data": {...}}``
    with ``data`` in header order and empty fields null. The C loop of
    :mod:`kappa_ingest.native` writes them where it builds, typed columns from their JSON
    literals rendered here as polars renders them; machines without a C compiler use polars.
    """
    # Each record names its file: a batch's few files, indexed once for the encoder and the producer.
    files = batch.column(FILE_COL).dictionary_encode()
    values = _native_values(batch, spec, now_ms, files)
    if values is None:
        return _encode_polars(batch, spec, now_ms)
    keys = None
    if spec.key_column is not None:
        keys = key_text(batch.column(spec.key_column)).view(pa.binary())
    if spec.event_time:
        micros = np.asarray(pc.cast(batch.column(EVENT_TS_COL), pa.timestamp("us", tz="UTC")).cast(pa.int64()))
        stamps = pa.array(micros // 1000)  # floored, as polars' epoch("ms")
    else:
        stamps = pa.array(np.full(batch.num_rows, now_ms, dtype=np.int64))
    return Encoded(
        keys=keys,
        values=values,
        timestamps_ms=stamps,
        source_files=files if pa.types.is_string(files.type.value_type) else files.cast(pa.string()),
    )


def key_text(arr: pa.Array) -> pa.Array:
    """A key column as the record's key text (a typed column's: :func:`_key_expr`)."""
    if pa.types.is_string(arr.type):
        return arr
    s = pl.from_arrow(arr)
    assert isinstance(s, pl.Series)
    return pl.select(_key_expr(pl.lit(s), s.dtype)).to_series().to_arrow().cast(pa.string())


def _key_expr(col: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """A typed key as text: a timestamp as the records write it (ISO, UTC, milliseconds),
    which is the text of a batch whose timestamps were all written so and kept as text
    (typed.LITERAL), so a key's bytes never depend on the rows beside it; any other value
    as polars casts it (a kept literal's text, by its definition)."""
    return _json_ready(col, dtype) if isinstance(dtype, pl.Datetime) else col.cast(pl.String)


def json_literals(arr: pa.Array) -> tuple[pa.Array, bool]:
    """A typed column's values as JSON text, byte for byte as the polars encoder writes
    them; and whether that text is a literal (written unquoted) rather than a string."""
    kind = arr.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return arr, False
    if pa.types.is_boolean(kind):
        return pc.if_else(arr, "true", "false"), True
    s = pl.from_arrow(arr)
    assert isinstance(s, pl.Series)
    dtype = s.dtype
    if isinstance(dtype, pl.Datetime | pl.Date):
        return _json_ready_series(s).to_arrow().cast(pa.string()), False
    if isinstance(dtype, pl.Decimal):
        s = s.cast(pl.Float64)
    if s.dtype.is_float():  # JSON has no NaN nor infinities: polars writes null
        s = pl.select(pl.when(s.is_finite()).then(s)).to_series()
    return s.cast(pl.String).to_arrow().cast(pa.string()), True


def _json_ready_series(s: pl.Series) -> pl.Series:
    return pl.select(_json_ready(pl.lit(s), s.dtype)).to_series()


def _literals(batch: pa.RecordBatch, schema: pa.Schema, column: str) -> tuple[pa.Array, bool]:
    kind = typed.literal_type(schema.field(column))
    if kind is not None:
        return batch.column(column), kind not in ("date", "timestamp")  # those two are JSON strings
    return json_literals(batch.column(column))


def _native_values(batch: pa.RecordBatch, spec: RecordSpec, now_ms: int, files: pa.Array) -> pa.Array | None:
    from kappa_ingest import native

    try:
        native.load()
    except native.NativeUnavailable:
        return None
    schema = batch.schema
    rendered = [_literals(batch, schema, c) for c in spec.columns]
    event = None
    if spec.event_time:
        event = typed.event_text(batch)
        if event is None:
            event = json_literals(batch.column(EVENT_TS_COL))[0]
    return native.json_values([t for t, _ in rendered], list(spec.columns), files, iso_ms(now_ms),
                              [raw for _, raw in rendered], event)  # fmt: skip


def _encode_polars(batch: pa.RecordBatch, spec: RecordSpec, now_ms: int) -> Encoded:
    df = pl.from_arrow(typed.materialized(batch))
    assert isinstance(df, pl.DataFrame)
    schema = df.schema
    ingest_ts = iso_ms(now_ms)
    data = pl.struct([_json_ready(pl.col(c), schema[c]).alias(c) for c in spec.columns])
    fields = [pl.lit(ingest_ts).alias("ingest_ts")]
    if spec.event_time:
        fields.append(_json_ready(pl.col(EVENT_TS_COL), schema[EVENT_TS_COL]).alias("event_ts"))
    fields += [pl.col(FILE_COL).alias("source_file"), data.alias("data")]
    exprs = [
        pl.struct(fields).struct.json_encode().cast(pl.Binary).alias("value"),
        pl.col(FILE_COL).alias("source_file"),
    ]
    if spec.event_time:
        exprs.append(pl.col(EVENT_TS_COL).dt.epoch("ms").alias("ts"))
    else:
        exprs.append(pl.lit(now_ms, dtype=pl.Int64).alias("ts"))
    if spec.key_column is not None:
        exprs.append(_key_expr(pl.col(spec.key_column), schema[spec.key_column]).cast(pl.Binary).alias("key"))
    out = df.select(exprs).to_arrow()
    return Encoded(
        keys=_array(out, "key") if spec.key_column is not None else None,
        values=_array(out, "value"),
        timestamps_ms=_array(out, "ts"),
        source_files=_array(out, "source_file"),
    )


def _array(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    # polars hands out large (64-bit offset) types; Spark's Arrow reader wants the plain ones.
    if pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.binary())
    elif pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    return arr


def kafka_batch(enc: Encoded, run_id: str) -> pa.RecordBatch:
    """Package encoded records in the schema of Spark's Kafka sink.

    The sink has no timestamp column: each record's timestamp travels as the header
    ``__kappa_ts`` (8-byte big-endian milliseconds), which the producer interceptor of
    :mod:`kappa_ingest.kafka.interceptor` turns into the record timestamp and removes.
    """
    import numpy as np

    n = enc.rows
    stamps = np.asarray(enc.timestamps_ms, dtype=np.int64).astype(">i8").view("S8")
    pool = pa.concat_arrays(
        [
            pa.array([run_id.encode()], pa.binary()),
            enc.source_files.cast(pa.binary()),
            pa.array(stamps, pa.binary(8)).cast(pa.binary()),
        ]
    )
    idx = np.empty(3 * n, dtype=np.int64)
    idx[0::3] = 0
    idx[1::3] = np.arange(1, n + 1)
    idx[2::3] = np.arange(n + 1, 2 * n + 1)
    header_keys = pa.array(["run_id", "source_file", TIMESTAMP_HEADER] * n, type=pa.string())
    headers = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32)),
        pa.StructArray.from_arrays([header_keys, pool.take(pa.array(idx))], names=["key", "value"]),
    )
    keys = enc.keys if enc.keys is not None else pa.nulls(n, pa.binary())
    timestamps = enc.timestamps_ms.cast(pa.timestamp("ms")).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(
        [keys, enc.values, timestamps, headers], names=["key", "value", "timestamp", "headers"]
    )


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def to_records(df: DataFrame, spec: RecordSpec, clock: Callable[[], int] = wall_clock_ms) -> DataFrame:
    """Parsed rows (the CSV's columns, FILE_COL[, EVENT_TS_COL]) → rows of Spark's Kafka
    sink schema: ``key, value, timestamp, headers``."""

    def convert(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield kafka_batch(encode_batch(batch, spec, clock()), spec.run_id)

    return df.mapInArrow(convert, KAFKA_RECORD_SCHEMA)
