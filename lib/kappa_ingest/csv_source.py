"""The CSV source: input paths → a DataFrame each task parses, and the parser it uses.

Two ways to read, chosen per run (``Source.mode``):

- ``lines`` (the fast path): Spark reads raw lines with their file and split offset, and
  each task parses its Arrow batches with :class:`kappa_ingest.parsing.LineParser`. Used
  for UTF-8, single-line records, RFC 4180 quoting (the quote escaped by doubling), all
  values as text, and when the files split into at least ``--partitions`` pieces.
- ``spark-csv``: Spark's CSV reader parses, in PERMISSIVE mode with a corrupt-record
  column, for everything else: ``--multiline``, other encodings and escapes, ``--schema``,
  ``--event-time-column``, and more partitions than the files split into (a shuffle).

Either way a row that cannot be read faithfully is quarantined with its reason, never
padded, cut or dropped: a field count that differs from the header's, a value that does
not fit ``--schema``, bytes not valid in the encoding, an unparseable event time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from kappa_ingest.columns import BLOCK_COL, CORRUPT_COL, EVENT_TS_COL, FILE_COL, LINE_COL, REJECT_COL
from kappa_ingest.config import IngestConfig
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.inputs import resolve_inputs
from kappa_ingest.parsing import BOM, REASON_MALFORMED, BatchParser, LineParser, RowParser
from kappa_ingest.records import RecordSpec

REPLACEMENT_CHAR = "\ufffd"


@dataclass(frozen=True)
class Source:
    """What the sinks consume: ``df`` (raw lines or Spark-parsed rows) and the ``parser``
    that turns each of its Arrow batches into clean rows and rejects."""

    df: DataFrame
    spec: RecordSpec
    parser: BatchParser
    mode: str  # "lines" | "spark-csv"
    files: tuple[str, ...]
    input_bytes: int


def reader_options(cfg: IngestConfig) -> dict[str, str]:
    """Spark CSV options for the configured dialect."""
    return {
        "header": str(cfg.header).lower(),
        "sep": cfg.delimiter,
        "quote": cfg.quote,
        "escape": cfg.escape,
        "encoding": cfg.encoding,
        "multiLine": str(cfg.multiline).lower(),
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": CORRUPT_COL,
        "enforceSchema": "false",
        # A value is the field's text: keep surrounding spaces.
        "ignoreLeadingWhiteSpace": "false",
        "ignoreTrailingWhiteSpace": "false",
    }


def _lines_possible(cfg: IngestConfig) -> bool:
    return (
        not cfg.multiline
        and not cfg.schema
        and cfg.event_time_column is None
        and cfg.escape == cfg.quote
        and cfg.encoding == "utf-8"
    )


def read(spark: SparkSession, cfg: IngestConfig) -> Source:
    """Build the source (lazy: nothing is read but the first file's header).

    With ``--partitions`` it sets the session's file split size to match.
    """
    paths, total = resolve_inputs(cfg.inputs)
    for key, value in split_size_for(total, cfg.partitions).items():
        spark.conf.set(key, value)
    header = first_line(paths[0]) if _lines_possible(cfg) else None
    schema = _schema(spark, cfg, paths, header)
    columns = tuple(schema.fieldNames())
    for name, what in ((cfg.key_column, "--key-column"), (cfg.event_time_column, "--event-time-column")):
        if name is not None and name not in columns:
            raise UsageError(f"{what} {name!r}: no such column; the columns are {', '.join(columns)}")
    spec = RecordSpec(columns, cfg.run_id, cfg.key_column, cfg.event_time_column is not None)
    if _lines_possible(cfg):
        lines = spark.read.text(paths).select(
            F.col("value").alias(LINE_COL),
            F.col("_metadata.file_path").alias(FILE_COL),
            F.col("_metadata.file_block_start").alias(BLOCK_COL),
        )
        splits = lines.rdd.getNumPartitions()
        if cfg.partitions is None or cfg.partitions <= splits:
            if header is None and cfg.header:
                header = _first_line(spark, paths[0])
            parser = LineParser(columns, cfg.delimiter, cfg.quote, header if cfg.header else None)
            df = lines.coalesce(cfg.partitions) if cfg.partitions and cfg.partitions < splits else lines
            return Source(df, spec, parser, "lines", tuple(paths), total)
    df = _spark_csv(spark, cfg, paths, schema)
    return Source(df, spec, RowParser(columns, cfg.delimiter, cfg.quote), "spark-csv", tuple(paths), total)


def _first_line(spark: SparkSession, path: str) -> str:
    row = spark.read.text(path).limit(1).collect()
    if not row:
        raise InputError(f"input {path}: empty file, no header; give a CSV with a header line or --no-header")
    return (row[0][0] or "").removeprefix(BOM)


MAX_HEADER_BYTES = 64 << 20


def first_line(path: str) -> str | None:
    """A local file's first line, BOM and line end removed, read by Python (no Spark job);
    None for a remote file, a blank first line or one longer than ``MAX_HEADER_BYTES``:
    Spark reads those. InputError for an empty file."""
    import gzip

    if urlparse(path).scheme not in ("", "file"):
        return None
    local = path.removeprefix("file://")
    try:
        with gzip.open(local, "rb") if local.endswith(".gz") else open(local, "rb") as f:
            head = b""
            while len(head) < MAX_HEADER_BYTES:
                chunk = f.read(1 << 16)
                head += chunk
                if not chunk or b"\n" in chunk or b"\r" in chunk:
                    break
    except (OSError, EOFError) as e:
        raise InputError(f"input {path}: cannot read its first line ({e}); check the file") from e
    if not head:
        raise InputError(f"input {path}: empty file, no header; give a CSV with a header line or --no-header")
    end = min((i for i in (head.find(b"\n"), head.find(b"\r")) if i >= 0), default=None)
    if end is None and len(head) >= MAX_HEADER_BYTES:
        return None
    line = head[:end].decode("utf-8", errors="replace").removeprefix(BOM)
    return line or None


def header_columns(line: str, cfg: IngestConfig) -> list[str]:
    """The column names Spark's CSV reader gives this first line (``CSVUtils.makeSafeHeader``):
    an empty name becomes ``_c<index>``, and names repeated (case-insensitively) get their
    index appended; without a header, ``_c0``, ``_c1``, ..."""
    import csv

    fields = next(csv.reader([line], delimiter=cfg.delimiter, quotechar=cfg.quote, doublequote=True), [])
    if not cfg.header:
        return [f"_c{i}" for i in range(len(fields))]
    lowered = [f.lower() for f in fields if f]
    duplicates = {name for name in lowered if lowered.count(name) > 1}
    return [f"_c{i}" if not f else f"{f}{i}" if f.lower() in duplicates else f for i, f in enumerate(fields)]


def _schema(spark: SparkSession, cfg: IngestConfig, paths: list[str], header: str | None) -> StructType:
    if cfg.schema:
        text = Path(cfg.schema).read_text() if os.path.isfile(cfg.schema) else cfg.schema
        try:
            schema = StructType.fromDDL(text.strip())
        except Exception as e:
            raise UsageError(f"--schema: not a valid Spark DDL schema ({str(e).splitlines()[0][:200]})") from e
        if not isinstance(schema, StructType):
            raise UsageError("--schema: expected column definitions, e.g. 'id INT, name STRING'")
        return schema
    if header is not None:
        columns = header_columns(header, cfg)
    else:
        options = {k: v for k, v in reader_options(cfg).items() if k != "enforceSchema"}
        try:
            columns = spark.read.options(**options).csv(paths[0]).columns
        except Exception as e:
            raise InputError(f"cannot read the CSV header of {paths[0]}: {str(e).splitlines()[0][:200]}") from e
        columns = [c for c in columns if c != CORRUPT_COL]
    if not columns:
        raise InputError(f"input {paths[0]}: empty file, no header; give a CSV with a header line or --no-header")
    return StructType([StructField(c, StringType()) for c in columns])


def _spark_csv(spark: SparkSession, cfg: IngestConfig, paths: list[str], schema: StructType) -> DataFrame:
    read_schema = StructType([*schema.fields, StructField(CORRUPT_COL, StringType())])
    df = spark.read.schema(read_schema).options(**reader_options(cfg)).csv(paths)
    df = df.withColumn(FILE_COL, F.col("_metadata.file_path"))
    if cfg.event_time_column is not None:
        col = F.col(cfg.event_time_column)
        fmt = cfg.event_time_format
        df = df.withColumn(EVENT_TS_COL, F.try_to_timestamp(col, F.lit(fmt)) if fmt else F.try_to_timestamp(col))
    df = df.withColumn(REJECT_COL, reject_reason(schema, cfg))
    return _repartition(df, cfg.partitions)


def reject_reason(schema: StructType, cfg: IngestConfig) -> Column:
    """Why Spark's parsed row must be quarantined, or null."""
    text_cols = [F.col(f.name) for f in schema.fields if isinstance(f.dataType, StringType)]
    reason = F.when(F.col(CORRUPT_COL).isNotNull(), F.lit(REASON_MALFORMED))
    if text_cols:
        has_replacement = F.instr(F.concat_ws("", *text_cols), REPLACEMENT_CHAR) > 0
        reason = reason.when(has_replacement, F.lit(f"bytes not valid in {cfg.encoding} (decoded as U+FFFD)"))
    if cfg.event_time_column is not None:
        fmt = f" in format {cfg.event_time_format!r}" if cfg.event_time_format else ""
        reason = reason.when(
            F.col(EVENT_TS_COL).isNull(), F.lit(f"event time {cfg.event_time_column!r} empty or not a timestamp{fmt}")
        )
    return reason


def _repartition(df: DataFrame, partitions: int | None) -> DataFrame:
    """Exactly ``partitions`` producers: coalesce when the scan splits finer, shuffle only
    when it cannot split as fine (gzip and multiline files are one split each)."""
    if partitions is None:
        return df
    current = df.rdd.getNumPartitions()
    if current > partitions:
        return df.coalesce(partitions)
    if current < partitions:
        return df.repartition(partitions)
    return df


def split_size_for(total_bytes: int, partitions: int | None) -> dict[str, str]:
    """Spark settings that make the file scan produce about ``partitions`` splits."""
    if not partitions or total_bytes <= 0:
        return {}
    size = max(4096, -(-total_bytes // partitions))
    return {"spark.sql.files.maxPartitionBytes": str(size), "spark.sql.files.openCostInBytes": "0"}
