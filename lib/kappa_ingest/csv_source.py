"""The CSV source: input paths → a DataFrame of the CSV's columns plus source columns.

Spark's CSV reader does the parsing (RFC 4180 by default: ``"`` quotes, escaped by
doubling), in PERMISSIVE mode with a corrupt-record column, so a row that cannot be read
faithfully is marked, never padded, cut or dropped. Each row gets its file (``FILE_COL``)
and, if it must be quarantined, the reason (``REJECT_COL``):

- a field count that differs from the header's, or a value that does not fit ``--schema``;
- bytes that are not valid in the declared encoding (Spark decodes them to U+FFFD);
- an event-time field that is empty or not in ``--event-time-format``.
"""

from __future__ import annotations

import csv
import glob
import gzip
import io
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from kappa_ingest.config import IngestConfig
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.records import EVENT_TS_COL, FILE_COL, REJECT_COL, RecordSpec

CORRUPT_COL = "__kappa_corrupt"
SUFFIXES = (".csv", ".csv.gz")
REASON_MALFORMED = "malformed"  # refined with field counts when quarantined
REPLACEMENT_CHAR = "\ufffd"


@dataclass(frozen=True)
class Source:
    """The parsed input: ``df`` has the CSV's columns, FILE_COL, REJECT_COL (and EVENT_TS_COL)."""

    df: DataFrame
    spec: RecordSpec
    files: tuple[str, ...]
    input_bytes: int


def resolve_inputs(inputs: tuple[str, ...]) -> tuple[list[str], int]:
    """Expand local files, directories and globs to the ``.csv``/``.csv.gz`` files they name.

    URIs with another scheme (``hdfs://``, ``s3a://``) are passed to Spark as given.
    Returns the paths and the local bytes found. InputError names a missing input.
    """
    paths: list[str] = []
    total = 0
    for item in inputs:
        scheme = urlparse(item).scheme
        if scheme not in ("", "file"):
            paths.append(item)
            continue
        local = item[len("file://") :] if item.startswith("file://") else item
        if glob.has_magic(local):
            matches = sorted(p for p in glob.glob(local) if os.path.isfile(p))
            if not matches:
                raise InputError(f"input {item}: no file matches; check the --input pattern")
        elif os.path.isdir(local):
            matches = sorted(str(p) for p in Path(local).iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
            if not matches:
                raise InputError(f"input {item}: directory has no .csv or .csv.gz files")
        elif os.path.isfile(local):
            matches = [local]
        else:
            raise InputError(f"input {item}: no such file or directory; check --input")
        for m in matches:
            if not os.access(m, os.R_OK):
                raise InputError(f"input {m}: not readable (permissions); fix its mode or run as its owner")
            total += os.path.getsize(m)
            paths.append(os.path.abspath(m))
    return paths, total


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
        # Values are the field's text: keep surrounding spaces, and leave dates as text.
        "ignoreLeadingWhiteSpace": "false",
        "ignoreTrailingWhiteSpace": "false",
    }


def _schema(spark: SparkSession, cfg: IngestConfig, paths: list[str], options: dict[str, str]) -> StructType:
    if cfg.schema:
        text = Path(cfg.schema).read_text() if os.path.isfile(cfg.schema) else cfg.schema
        try:
            schema = StructType.fromDDL(text.strip())
        except Exception as e:
            raise UsageError(f"--schema: not a valid Spark DDL schema ({str(e).splitlines()[0][:200]})") from e
        if not isinstance(schema, StructType):
            raise UsageError("--schema: expected column definitions, e.g. 'id INT, name STRING'")
        return schema
    try:
        columns = spark.read.options(**{k: v for k, v in options.items() if k != "enforceSchema"}).csv(paths).columns
    except Exception as e:
        raise InputError(f"cannot read the CSV header of {paths[0]}: {str(e).splitlines()[0][:200]}") from e
    columns = [c for c in columns if c != CORRUPT_COL]
    if not columns:
        raise InputError(f"input {paths[0]}: empty file, no header; give a CSV with a header line or --no-header")
    return StructType([StructField(c, StringType()) for c in columns])


def read(spark: SparkSession, cfg: IngestConfig) -> Source:
    """Build the source DataFrame (lazy: nothing is read but the header).

    With ``--partitions`` it sets the session's file split size to match."""
    paths, total = resolve_inputs(cfg.inputs)
    for key, value in split_size_for(total, cfg.partitions).items():
        spark.conf.set(key, value)
    options = reader_options(cfg)
    schema = _schema(spark, cfg, paths, options)
    columns = tuple(schema.fieldNames())
    for name, what in ((cfg.key_column, "--key-column"), (cfg.event_time_column, "--event-time-column")):
        if name is not None and name not in columns:
            raise UsageError(f"{what} {name!r}: no such column; the columns are {', '.join(columns)}")
    read_schema = StructType([*schema.fields, StructField(CORRUPT_COL, StringType())])
    df = spark.read.schema(read_schema).options(**options).csv(paths)
    df = df.withColumn(FILE_COL, F.col("_metadata.file_path"))
    if cfg.event_time_column is not None:
        col = F.col(cfg.event_time_column)
        fmt = cfg.event_time_format
        df = df.withColumn(EVENT_TS_COL, F.try_to_timestamp(col, F.lit(fmt)) if fmt else F.try_to_timestamp(col))
    # CORRUPT_COL stays: the quarantine keeps a malformed row's raw text.
    df = df.withColumn(REJECT_COL, reject_reason(schema, cfg))
    df = _repartition(spark, df, cfg.partitions)
    spec = RecordSpec(columns, cfg.run_id, cfg.key_column, cfg.event_time_column is not None)
    return Source(df, spec, tuple(paths), total)


def reject_reason(schema: StructType, cfg: IngestConfig) -> Column:
    """Why a row must be quarantined, or null. One definition for counting and writing."""
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


def _repartition(spark: SparkSession, df: DataFrame, partitions: int | None) -> DataFrame:
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
    size = max(1 << 20, -(-total_bytes // partitions))
    return {"spark.sql.files.maxPartitionBytes": str(size), "spark.sql.files.openCostInBytes": "0"}


def malformed_detail(line: str | None, header_fields: int, cfg_delimiter: str, cfg_quote: str) -> str:
    """A malformed row's reason for people: its field count against the header's."""
    if line is None:
        return REASON_MALFORMED
    try:
        row = next(csv.reader(io.StringIO(line), delimiter=cfg_delimiter, quotechar=cfg_quote), [])
    except csv.Error:
        return "unbalanced quotes"
    if len(row) != header_fields:
        return f"{len(row)} fields where the header has {header_fields}"
    return "a value does not fit --schema"


def open_text(path: str, encoding: str) -> io.TextIOBase:
    """A local CSV (plain or gzip) as text, for checks and tests."""
    raw = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding=encoding, newline="")
