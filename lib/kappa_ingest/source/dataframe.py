"""The CSV source: input paths → a DataFrame each task parses, and the parser it uses.

Two ways to read, chosen per run (``Source.mode``):

- ``lines`` (the fast path): Spark reads raw lines with their file and split offset, and
  each task parses its Arrow batches with :class:`kappa_ingest.source.parsing.LineParser`. Used
  for single-line records with RFC 4180 quoting (the quote escaped by doubling), in UTF-8,
  a single-byte encoding or UTF-16 (:mod:`kappa_ingest.source.transcode`; UTF-16 from local
  files, whose lines the tasks find by unit: :mod:`kappa_ingest.source.split_reader`). Where rows must move between
  tasks (an ordered replay, more ``--partitions`` than the files split into) the raw
  lines are shuffled and sorted before they are parsed (:mod:`kappa_ingest.source.line_shuffle`).
- ``spark-csv``: Spark's CSV reader parses, in PERMISSIVE mode with a corrupt-record
  column, for the rest: ``--multiline``, backslash escapes, multi-byte encodings other
  than UTF-8 and UTF-16 (Shift-JIS, GB18030).

Both read every field as text; ``--schema``, ``--null-value`` and the event time are
applied to that text by :mod:`kappa_ingest.source.typed`, the same code whichever path read it.

Either way a row that cannot be read faithfully is quarantined with its reason, never
padded, cut or dropped: a field count that differs from the header's, a value that does
not fit ``--schema``, bytes not valid in the encoding, an unparseable event time.

Every row carries its file and split (start and length), the unit the delivery ledger
records; the split size is fixed by the run (:mod:`kappa_ingest.source.splits`), so a resumed
run reads the same splits. A shuffle hash-partitions each row by its raw line (on Spark's
reader: by its own values in its own file's column order), or an ordered one by its key,
so a unit (a part of a split) is the same rows whichever other files a run reads beside
it; the plan records which (``Plan.parts_by``), and a resumed run keeps its original's.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
from pyspark import RDD
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructField, StructType

from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.s3.access import is_s3
from kappa_ingest.source import line_shuffle, opening, split_reader, splits, text_scan, transcode
from kappa_ingest.source.columns import (
    BLOCK_COL,
    BLOCK_LEN_COL,
    CORRUPT_COL,
    EVENT_TS_COL,
    EVENT_US_COL,
    FILE_COL,
    LINE_COL,
    REJECT_COL,
    ROW_HASH_COL,
)
from kappa_ingest.source.inputs import SUFFIXES, check_head, resolve_inputs
from kappa_ingest.source.parsing import BOM, REASON_MALFORMED, BatchParser, Layout, LineParser, RowParser, Typed
from kappa_ingest.source.records import RecordSpec
from kappa_ingest.source.splits import InputFile, Plan
from kappa_ingest.source.typed import Typing

REPLACEMENT_CHAR = "\ufffd"


class ReadOptions(Protocol):
    """What reading the inputs asks of the run's settings (:class:`kappa_ingest.config.IngestConfig`
    has them all; this folder sits below the configuration and does not import it)."""

    @property
    def inputs(self) -> tuple[str, ...]: ...
    @property
    def partitions(self) -> int | None: ...
    @property
    def split_size(self) -> int | None: ...
    @property
    def key_column(self) -> str | None: ...
    @property
    def event_time_column(self) -> str | None: ...
    @property
    def event_time_format(self) -> str | None: ...
    @property
    def schema(self) -> str | None: ...
    @property
    def null_values(self) -> tuple[str, ...]: ...
    @property
    def delimiter(self) -> str: ...
    @property
    def quote(self) -> str: ...
    @property
    def escape(self) -> str: ...
    @property
    def encoding(self) -> str: ...
    @property
    def header(self) -> bool: ...
    @property
    def multiline(self) -> bool: ...
    @property
    def strict_header(self) -> bool: ...
    @property
    def run_id(self) -> str: ...
    @property
    def order_by_event_time(self) -> bool: ...
    @property
    def incremental(self) -> bool: ...

    @property
    def watch_id(self) -> str | None: ...
    @property
    def replay_speed(self) -> float | None: ...


@dataclass(frozen=True)
class Source:
    """What the sinks consume: ``df`` (raw lines or Spark-parsed rows) and the ``parser``
    that turns each of its Arrow batches into clean rows and rejects."""

    df: DataFrame
    spec: RecordSpec
    parser: BatchParser
    mode: str  # "lines" | "spark-csv"
    files: tuple[str, ...]  # the paths read (a resumed run leaves out files delivered whole)
    input_bytes: int
    plan: Plan  # every unit of the run's input, read or not
    tasks: int  # Spark partitions of df (asking df itself would run a shuffle's map stage)
    headers: tuple[Header, ...] = ()  # the distinct headers of the files read, first file's first
    ordered: bool = False  # each task's rows sorted by event time (--order-by-event-time, --replay-speed)
    shuffled: bool = False  # rows repartitioned: each task holds one part of many splits
    types: dict[str, DataType] = field(default_factory=dict)  # the --schema types of the columns it names
    # Where the tasks read their own splits: each task's splits, ``df``'s partitions as batches.
    handed: tuple[pa.RecordBatch, ...] = ()
    # An ordered replay's rows as an RDD of batches of at most the given rows, where Python
    # tasks can move and sort them (line_shuffle.places_in_event_time_order); ``df`` is the same rows.
    places: Callable[[int], RDD] | None = None

    @property
    def narrow(self) -> bool:
        """Rows of a bounded width: each task's splits, or lines moved by their offsets
        or places with their marks, no line's text (:mod:`kappa_ingest.spark.arrow_batches`)."""
        return self.mode == "lines" and LINE_COL not in self.df.columns

    def event_micros(self) -> Column:
        """Each row's event time in UTC microseconds, as the rows were sorted by (ordered runs)."""
        if EVENT_US_COL in self.df.columns:  # lines sorted before they were parsed
            return F.col(EVENT_US_COL)
        return F.unix_micros(F.col(EVENT_TS_COL))


def reader_options(cfg: ReadOptions) -> dict[str, str]:
    """Spark CSV options for the configured dialect."""
    return {
        "header": str(cfg.header).lower(),
        "sep": cfg.delimiter,
        "quote": cfg.quote,
        "escape": cfg.escape,
        "encoding": cfg.encoding,
        # Spark reads UTF-16 right only as a stream: its line reader cuts at bytes.
        "multiLine": str(cfg.multiline or transcode.wide(cfg.encoding)).lower(),
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": CORRUPT_COL,
        "enforceSchema": "false",
        # A value is the field's text: keep surrounding spaces.
        "ignoreLeadingWhiteSpace": "false",
        "ignoreTrailingWhiteSpace": "false",
    }


def _lines_possible(cfg: ReadOptions) -> bool:
    encoding_ok = cfg.encoding == "utf-8" or transcode.wide(cfg.encoding) or transcode.table(cfg.encoding) is not None
    return not cfg.multiline and cfg.escape == cfg.quote and encoding_ok


def _sorted_by_event_time(cfg: ReadOptions) -> bool:
    """Rows sorted by event time in Spark (ordered replays, paced ones)."""
    return bool(cfg.event_time_column and (cfg.order_by_event_time or cfg.replay_speed))


def typing_for(cfg: ReadOptions, declared: StructType | None) -> Typing:
    """What turns the fields' text into the records' values, the same on every read path."""
    types = tuple(
        (f.name, f.dataType.simpleString()) for f in (declared.fields if declared else ())
        if not isinstance(f.dataType, StringType)
    )  # fmt: skip
    return Typing(types, cfg.null_values, cfg.event_time_column, cfg.event_time_format)


def read(spark: SparkSession, cfg: ReadOptions, pinned: Plan | None = None, paths: list[str] | None = None) -> Source:
    """Build the source (lazy: nothing is read but each file's header).

    ``pinned`` is the plan of the run a resumed run continues (its split size and parts
    are kept), ``paths`` the files it still has to read; else the plan is made here from
    ``cfg.inputs``. The split size is set in the session's configuration.
    """
    with _utc_session(spark):  # (--schema's TIMESTAMP, Spark reader's parses of time text)
        return _read(spark, cfg, pinned, paths)


# Long: the choice of read path and its plan, which must be read as one decision.
def _read(spark: SparkSession, cfg: ReadOptions, pinned: Plan | None, paths: list[str] | None) -> Source:
    if paths is None:
        paths, _ = resolve_inputs(cfg.inputs)
    plan = pinned or make_plan(spark, cfg, paths)
    named = {splits.canonical_file(p) for p in paths}
    reading = [f for f in plan.files if f.path in named]
    read_bytes = sum(f.size for f in reading)
    open_cost = 0 if cfg.partitions else splits.OPEN_COST_BYTES
    if _split_per_task(cfg):
        # No two splits in one task where a task's rows are sorted but not shuffled (each
        # task's transaction, one unit).
        open_cost = plan.split_bytes
    elif cfg.incremental and not cfg.watch_id:
        # The split size is fixed (64 MiB), which would pack a landing directory's files
        # into one task: a task per split instead.
        open_cost = plan.split_bytes
    elif cfg.incremental:
        # A watch's batch: its small files in tasks of as many as make it shortest (docs/watch.md).
        open_cost = splits.waves_open_cost([f.size for f in reading], plan.split_bytes,
                                                 spark.sparkContext.defaultParallelism)  # fmt: skip
    local = all("://" not in p or p.startswith("file:") for p in paths)
    for key, value in splits.spark_conf(plan.split_bytes, open_cost, local).items():
        spark.conf.set(key, value)
    etags = {f.path: f.version for f in plan.files if f.version}
    if etags:  # the driver's reads of the objects (their headers) hold them to the plan too
        opening.use(opening.Store(opening.store().access, etags))
    layouts = file_layouts(spark, cfg, paths)
    headers = group_headers(layouts)
    if cfg.strict_header and len(headers) > 1:
        raise InputError(_differ(layouts))
    declared = _declared_schema(cfg)
    typed = typing_for(cfg, declared)
    _check_columns(cfg, headers, declared)
    first = headers[0].columns
    spec = RecordSpec(first, cfg.run_id, cfg.key_column, cfg.event_time_column is not None)
    # Without drift the parsers need no per-file lookup.
    by_file = {splits.canonical_file(p): lay for p, lay in layouts.items()} if len(set(layouts.values())) > 1 else {}
    # A resumed run keeps its original's parts only if they were made the same way.
    in_store = any(is_s3(p) for p in paths)
    line_parts = plan.parts == 1 or plan.parts_by in (splits.BY_LINES, splits.BY_KEYS)
    if in_store and not (_lines_possible(cfg) and line_parts):
        raise UsageError(opening.needs_spark_reader(paths[0], cfg.multiline, cfg.escape, cfg.quote, cfg.encoding))
    if _lines_possible(cfg) and line_parts:
        head = layouts[paths[0]]
        line_parser = LineParser(head.columns, cfg.delimiter, cfg.quote, head.header_line, by_file,
                                 encoding=cfg.encoding)  # fmt: skip
        text: _TextScan | None = None
        if in_store:  # no Spark scan: the tasks read the objects' splits themselves
            files, splits_read = paths, scan_tasks(plan, paths, open_cost)
            line_parser = replace(line_parser, reads_splits=True, store=opening.store())
        else:
            text = _TextScan(spark, paths, line_parser)
            named = spark_names(paths)
            if named is not None and split_reader.usable(named):
                # Spark's scan of these files would only say how many tasks it makes of them
                # and what it names them: both known here (a 250-file watch batch: 0.2 s less).
                files, splits_read = named, scan_tasks(plan, paths, open_cost)
            else:
                files, splits_read = text.files(), text.tasks()
        # Where tasks can read their splits themselves, Spark's JVM reads none of the lines.
        own = split_reader.usable(files)
        own_frame = split_reader.frame(spark, plan, files, splits_read) if own else None
        own_scan = None
        if own_frame is not None:  # an ordered replay's lines name their splits by number
            numbered = split_reader.numbered_splits(own_frame[1]) if _sorted_by_event_time(cfg) else ()
            own_scan = (own_frame[0], replace(line_parser, reads_splits=True, splits=numbered))
        handed: list[pa.RecordBatch] = []
        # Lines Spark reads, made where something needs them (in a store, the tasks' own reading is the only one).
        scan = text.scan if text is not None else lambda: own_scan
        # A gzipped object's lines have no offsets in the object: they move with their text.
        whole = not all(splits.splittable(p, cfg.multiline) for p in paths)
        handed_own = own_frame[1] if own_frame is not None else None
        moved = _moved_lines(spark, cfg, scan, own_scan, typed, splits_read, pinned, whole, handed_own, read_bytes)
        if moved is None:
            tasks = min(splits_read, cfg.partitions or splits_read)
            if own_frame is not None:
                df, handed = own_frame if tasks == splits_read else split_reader.frame(spark, plan, files, tasks)
                tasks = len(handed)
                line_parser = replace(line_parser, reads_splits=True)
            else:
                lines = scan()[0]
                df = lines.coalesce(tasks) if tasks < splits_read else lines
            return Source(df, spec, _typed(line_parser, typed), "lines", tuple(paths), read_bytes, plan, tasks,
                          headers, types=_types(declared), handed=tuple(handed))  # fmt: skip
        df, parts, tasks, shuffled, marking, by, places = moved
        plan = Plan(plan.files, plan.split_bytes, parts, by if parts > 1 else "")
        parser = _typed(line_shuffle.after_shuffle(marking), typed)
        return Source(df, spec, parser, "lines", tuple(paths), read_bytes, plan, tasks, headers,
                      _sorted_by_event_time(cfg), shuffled, _types(declared), places=places)  # fmt: skip
    # Spark reads text too: the typed values are made by the same code as on the line path.
    # ("": a plan from before parts_by was recorded, whose parts were Spark's rows'.)
    if pinned is not None and plan.parts > 1 and plan.parts_by not in ("", splits.BY_ROWS, splits.BY_KEY_VALUES):
        raise UsageError(f"the rows delivered before were parted by {plan.parts_by!r}, which Spark's CSV reader"
                         " does not part by here: resume them with the kappa-ingest version that sent them")  # fmt: skip
    groups = [([p for p in paths if layouts[p].columns == h.columns], _text_schema(h.columns)) for h in headers]
    df, parts, tasks, shuffled, by = _spark_csv(spark, cfg, groups, pinned, _types(declared))
    plan = Plan(plan.files, plan.split_bytes, parts, by if parts > 1 else "")
    parser = _typed(RowParser(first, cfg.delimiter, cfg.quote, by_file), typed)
    return Source(df, spec, parser, "spark-csv", tuple(paths), read_bytes, plan, tasks, headers,
                  _sorted_by_event_time(cfg), shuffled, _types(declared))  # fmt: skip


def scan_tasks(plan: Plan, paths: list[str], open_cost: int) -> int:
    """The tasks Spark's file scan packs the splits of ``paths`` into, with the run's
    settings (:func:`splits.spark_conf`: one minimum partition, so the split size is the
    plan's): known without the scan, and objects in a store, which Spark cannot scan here,
    read by as many tasks as local files of their sizes. An empty file is no split."""
    names = {splits.canonical_file(p) for p in paths}
    sizes = [length for f in plan.files if f.path in names for _, length in plan.splits(f) if length]
    return max(1, len(splits.spark_packing(sizes, plan.split_bytes, open_cost)))


PLAIN_PATH = re.compile(r"/[A-Za-z0-9/._+,=@~-]*")  # what Hadoop's Path and Java's URI leave as it is


def spark_names(paths: list[str]) -> list[str] | None:
    """What Spark's scan names local files (``file:/a/b.csv``), where that is plain: absolute
    paths of letters, digits and the few marks a URI path keeps unquoted, no ``//``. None
    for any other (Spark quotes them its own way: its scan is asked)."""
    if not all(PLAIN_PATH.fullmatch(p) and "//" not in p for p in paths):
        return None
    return [f"file:{os.path.normpath(p)}" for p in paths]


def skipped_by_spark(paths: list[str]) -> None:
    """Spark's file listing leaves out files named ``_x`` or ``.x`` (its rule for metadata
    and hidden files, ``HadoopFSUtils.shouldFilterOutPathName``), even named one by one: a
    run that let Spark read them would plan them and never read them."""
    for p in paths:
        name = os.path.basename(splits.canonical_file(p))
        if (name.startswith("_") and "=" not in name) or name.startswith("."):
            raise InputError(
                f"input {p}: Spark's file reader skips names beginning with '_' or '.', and this run needs it"
                " (compressed, --multiline, an --escape other than the quote, or a shuffle of its lines);"
                " rename the file, or leave it out"
            )


class _TextScan:
    """Spark's text scan of local files, made only where something needs it: how many
    tasks Spark makes of them and their names for a path with marks in it, the lines
    moved by a shuffle, a compressed file read by Spark."""

    def __init__(self, spark: SparkSession, paths: list[str], parser: LineParser) -> None:
        self.spark, self.paths, self.parser = spark, paths, parser
        self._lines: DataFrame | None = None

    def scan(self) -> tuple[DataFrame, LineParser]:
        if self._lines is None:
            skipped_by_spark(self.paths)
            self._lines = text_scan.read_text(self.spark, self.paths).select(
                F.col("value").alias(LINE_COL),
                F.col("_metadata.file_path").alias(FILE_COL),
                F.col("_metadata.file_block_start").alias(BLOCK_COL),
                F.col("_metadata.file_block_length").alias(BLOCK_LEN_COL),
            )
        return self._lines, self.parser

    def tasks(self) -> int:
        return self.scan()[0]._jdf.rdd().getNumPartitions()  # the JVM's plan only, no Python RDD made

    def files(self) -> list[str]:
        return [split_reader.spark_file_path(u) for u in text_scan.input_files(self.scan()[0])]


def _moved_lines(
    spark: SparkSession,
    cfg: ReadOptions,
    scan: Callable[[], tuple[DataFrame, LineParser]],
    own_scan: tuple[DataFrame, LineParser] | None,
    typed: Typing,
    splits_read: int,
    pinned: Plan | None,
    whole: bool = False,
    handed: list[pa.RecordBatch] | None = None,
    read_bytes: int = 0,
) -> tuple[DataFrame, int, int, bool, LineParser, str, Callable[[int], RDD] | None] | None:
    """The raw lines shuffled or sorted before they are parsed, where the run asks for it
    (:mod:`kappa_ingest.source.line_shuffle`): with the parts per split, the number of tasks,
    whether they were shuffled, the parser that marked them, what parted them (a plan's
    ``parts_by``) and, for an ordered replay Python tasks can move (``Source.places``), the
    same rows as an RDD; None where the scan's own tasks and order will do. ``scan``: Spark's
    text scan and its parser (made when asked); ``own_scan``: the splits for tasks that read
    them themselves, where they can, ``handed`` to them as these batches. ``pinned``: a
    resumed run keeps its original's parts, made the same way. ``whole``: lines the tasks
    read move with their text. ``read_bytes``: the input's size."""
    parts = pinned.parts if pinned is not None else None
    ordered = own_scan or scan()  # lines parted by their key, or not parted: moved by offset where they can be
    if cfg.order_by_event_time:  # each key's rows in one task, in event-time order
        parts = parts or cfg.partitions or spark.sparkContext.defaultParallelism
        # By Kafka's partition of each key (runs planned before it: a hash of the key's text).
        by = splits.BY_LINES if pinned is not None and pinned.parts_by == splits.BY_LINES else splits.BY_KEYS
        lines, parser = ordered
        by_part = parts if by == splits.BY_KEYS else None
        mark, fields = line_shuffle.marking(lines.schema, parser, typed, cfg.key_column, whole, by_part)
        places = None
        # Places only (each task reads its lines back), of an input small enough for one part
        # to hold all of it: parts by key, one key may be most of the rows.
        if handed and by_part and not whole and read_bytes <= line_shuffle.PYTHON_SORT_BYTES:
            places = partial(line_shuffle.places_in_event_time_order, spark.sparkContext, handed, mark, parts)
        marked = lines.mapInArrow(mark, fields)
        return line_shuffle.by_key_in_event_time_order(marked, parts), parts, parts, True, parser, by, places
    if _sorted_by_event_time(cfg):  # paced: each split's rows in event-time order, in its own task
        sorted_lines = line_shuffle.in_event_time_order(line_shuffle.marked(*ordered, typed, whole=whole))
        return sorted_lines, 1, splits_read, False, ordered[1], splits.BY_LINES, None
    if parts is None and not cfg.incremental and cfg.partitions is not None and cfg.partitions > splits_read:
        parts = cfg.partitions
    if parts is None or parts == 1:
        return None
    # A line's part is a hash of its text, which the text scan moves with it (UTF-16, which
    # only the tasks read right: of its place in its file).
    lines, parser = own_scan if transcode.wide(cfg.encoding) and own_scan else scan()
    return (
        line_shuffle.by_line(line_shuffle.marked(lines, parser, whole=whole), parts),
        parts,
        parts,
        True,
        parser,
        splits.BY_LINES,
        None,
    )


def _typed(parser: BatchParser, typed: Typing) -> BatchParser:
    return Typed(parser, typed) if typed.active else parser


def _types(declared: StructType | None) -> dict[str, DataType]:
    return {f.name: f.dataType for f in declared.fields} if declared else {}


def _split_per_task(cfg: ReadOptions) -> bool:
    """Paced without an ordering by key, each task's rows are sorted by event time as they
    are, unshuffled: a task must then hold one split (its transaction, one unit)."""
    return bool(cfg.replay_speed and not (cfg.order_by_event_time and cfg.key_column))


@dataclass(frozen=True)
class Header:
    """One distinct header among the run's files: its columns and the files that have it."""

    columns: tuple[str, ...]
    files: tuple[str, ...]  # canonical_file() names

    def to_json(self) -> dict:
        return {"columns": list(self.columns), "files": list(self.files)}


def file_layouts(spark: SparkSession, cfg: ReadOptions, paths: list[str]) -> dict[str, Layout]:
    """Each file's columns and header line, read before any Spark job where Python can
    read the file (local, in an ASCII-compatible encoding); else by a one-line Spark read.
    Without a header, every file has the first file's field count, named ``_c0``, ``_c1``, ..."""
    if not cfg.header:
        for path in paths[1:]:  # the first file's first line is read below; each file is checked
            first_line(path, cfg.encoding, header=False, delimiter=cfg.delimiter)
        return dict.fromkeys(paths, Layout(_layout(spark, cfg, paths[0]).columns, None))
    return {path: _layout(spark, cfg, path) for path in paths}


def _header_line(spark: SparkSession, cfg: ReadOptions, path: str) -> str | None:
    """The file's first line; None where only Spark's CSV reader can read it (encodings
    whose line ends are not ASCII bytes)."""
    line = first_line(path, cfg.encoding, cfg.header, cfg.delimiter)
    if line is None and cfg.encoding == "utf-8":
        line = _first_line(spark, path)
    if line == "" and cfg.header:
        raise InputError(
            f"input {path}: the first line is blank; the header must be the first line (or give --no-header)"
        )
    return line


def _layout(spark: SparkSession, cfg: ReadOptions, path: str) -> Layout:
    line = _header_line(spark, cfg, path)
    columns = header_columns(line, cfg) if line else _spark_header(spark, cfg, path)
    return Layout(tuple(columns), line)


def group_headers(layouts: dict[str, Layout]) -> tuple[Header, ...]:
    """The distinct headers, in the order of the first file having each."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for path, layout in layouts.items():
        groups.setdefault(layout.columns, []).append(splits.canonical_file(path))
    return tuple(Header(columns, tuple(files)) for columns, files in groups.items())


def _differ(layouts: dict[str, Layout]) -> str:
    (p0, l0), *rest = layouts.items()
    path, other = next((p, lay) for p, lay in rest if lay.columns != l0.columns)
    shown = ",".join(other.columns)[:80]
    return (f"the header of {path} ({shown!r}) differs from the first file's ({p0}: {','.join(l0.columns)[:80]!r});"
            " --strict-header refuses files whose headers differ")  # fmt: skip


def _ascii_compatible(encoding: str) -> bool:
    """Whether the encoding writes the delimiter and line ends as ASCII bytes (then Python
    finds a file's first line in its bytes)."""
    try:
        return '\n\r,;|\t"'.encode(encoding) == b'\n\r,;|\t"'
    except (LookupError, UnicodeError):
        return False


def _spark_header(spark: SparkSession, cfg: ReadOptions, path: str) -> list[str]:
    options = {k: v for k, v in reader_options(cfg).items() if k != "enforceSchema"}
    try:
        columns = spark.read.options(**options).csv(path).columns
    except Exception as e:
        raise InputError(f"cannot read the CSV header of {path}: {str(e).splitlines()[0][:200]}") from e
    columns = [c for c in columns if c != CORRUPT_COL]
    if not columns:
        raise InputError(f"input {path}: empty file, no header; give a CSV with a header line or --no-header")
    return columns


def make_plan(spark: SparkSession, cfg: ReadOptions, paths: list[str]) -> Plan:
    """The run's files (size, modification time) and its split size; one part per split
    (the CSV source raises it when it must shuffle)."""
    local = [p for p in paths if urlparse(p).scheme in ("", "file")]
    files = [splits.local_file(p.removeprefix("file://"), cfg.multiline) for p in local]
    objects = [p for p in paths if is_s3(p)]
    files += [splits.object_file(p, cfg.multiline) for p in objects]
    remote = [p for p in paths if p not in local and p not in objects]
    if remote:
        files += remote_files(spark, remote, cfg.multiline)
    sizes, cores = [f.size for f in files], spark.sparkContext.defaultParallelism
    split_bytes, _ = splits.default_split_bytes(sizes, cfg.partitions, cores)
    if cfg.incremental:  # every scheduled run splits a file alike, whatever else it reads
        split_bytes = splits.INCREMENTAL_SPLIT_BYTES
    elif _units_within_shares(cfg, Plan(tuple(files), split_bytes), paths):
        split_bytes, _ = splits.default_split_bytes(sizes, cfg.partitions, cores, cfg.split_size or splits.UNIT_BYTES)
    return Plan(tuple(files), split_bytes)


def _units_within_shares(cfg: ReadOptions, shares: Plan, paths: list[str]) -> bool:
    """Whether each task's share (``--partitions``; ``shares``, the plan of a split a share)
    can be cut into units (``--split-size``): its splits read one after another, unsorted
    and unshuffled; so not where the shares' splits are fewer than the tasks, whose lines
    are shuffled into parts instead (:func:`_moved_lines`), nor where the line path does
    not read them."""
    if not cfg.partitions or not _lines_possible(cfg) or _sorted_by_event_time(cfg) or _split_per_task(cfg):
        return False
    return scan_tasks(shares, paths, 0) >= cfg.partitions


def remote_files(spark: SparkSession, uris: list[str], multiline: bool) -> list[InputFile]:
    """Size and modification time of remote inputs (files, directories, globs), from the
    Hadoop file system Spark reads them with."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    out: list[InputFile] = []
    for uri in uris:
        path = jvm.org.apache.hadoop.fs.Path(uri)
        fs = path.getFileSystem(conf)
        statuses = fs.globStatus(path) or []
        for st in statuses:
            found = [st] if st.isFile() else [c for c in fs.listStatus(st.getPath()) if c.isFile()]
            for f in found:
                name = splits.canonical_file(f.getPath().toUri().toString())
                if st.isFile() or name.endswith(SUFFIXES):
                    out.append(InputFile(name, f.getLen(), f.getModificationTime(), splits.splittable(name, multiline)))
    if not out:
        raise InputError(f"input {', '.join(uris)}: no file found; check --input")
    return out


def _first_line(spark: SparkSession, path: str) -> str:
    row = spark.read.text(path).limit(1).collect()
    if not row:
        raise InputError(f"input {path}: empty file, no header; give a CSV with a header line or --no-header")
    return (row[0][0] or "").removeprefix(BOM)


MAX_HEADER_BYTES = 64 << 20


# Long: each way a first line can be refused, in the order they are checked.
def first_line(path: str, encoding: str = "utf-8", header: bool = True, delimiter: str = ",") -> str | None:
    """A local file's first line, BOM and line end removed, read by Python (no Spark job);
    None for a remote file, a blank first line, one longer than ``MAX_HEADER_BYTES`` or an
    encoding whose line ends are not ASCII bytes (other than UTF-16): Spark reads those.

    InputError for an empty file, one whose first 64 KiB are not CSV text (binary data, a
    gzip stream under a ``.csv`` name: :func:`kappa_ingest.source.inputs.check_head`; the
    ``delimiter`` counts as text), a UTF-16 file that is remote or compressed (only the
    tasks' own reading finds its lines) and, when it is a ``header``, a first line that is
    not valid in ``encoding`` (named with its byte offset: the file is in another
    encoding, to be given with ``--encoding``)."""
    import zlib

    wide = transcode.wide(encoding)
    local = path.removeprefix("file://")
    compressed = local.endswith(".gz")
    readable = urlparse(path).scheme in ("", "file") or is_s3(path)  # by Python, here
    if wide and (compressed or not readable):
        raise InputError(
            f"input {path}: --encoding {encoding} is read from local uncompressed files (or objects) only;"
            f" decompress it, or convert it to UTF-8 (iconv -f {encoding.upper()} -t UTF-8)"
        )
    if not readable or not (wide or _ascii_compatible(encoding)):
        return None
    order = transcode.byte_order(encoding, local) if wide else None
    try:
        with opening.open_input(local, decompress=compressed) as f:
            head, end = b"", None
            while len(head) < MAX_HEADER_BYTES:
                chunk = f.read(1 << 16)
                head += chunk
                end = _line_end(head, order, len(head) - len(chunk) - 1)
                if not chunk or end is not None:
                    break
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"input {path}: cannot read its first line ({e}); check the file") from e
    if not head:
        once = " once decompressed" if compressed else ""
        raise InputError(
            f"input {path}: empty file (0 bytes{once}), no header; give a CSV with a header line or --no-header"
        )
    if order is None:
        check_head(path, head, compressed, end, delimiter)
    else:  # judged as the text it decodes to
        codec = "utf-16-le" if order == "<" else "utf-16-be"
        shown_end = None if end is None else len(head[:end].decode(codec, errors="replace").encode())
        check_head(path, head.decode(codec, errors="replace").encode(), compressed, shown_end, delimiter)
        encoding = codec
    if end is None and len(head) >= MAX_HEADER_BYTES:
        return None
    raw = head[:end]
    try:
        line = raw.decode(encoding)
    except UnicodeDecodeError as e:
        if header:
            where = " of its decompressed text" if compressed else ""
            raise InputError(
                f"input {path}: its header is not valid {encoding}: byte 0x{raw[e.start]:02x} at byte offset"
                f" {e.start:,}{where}; give the file's encoding with --encoding (e.g. --encoding iso-8859-1)"
            ) from e
        line = raw.decode(encoding, errors="replace")  # data: the parser quarantines such a line
    line = line.removeprefix(BOM)
    return line or None


def _line_end(head: bytes, order: str | None, since: int) -> int | None:
    """Where the first line of ``head`` ends (its first ``\\n`` or ``\\r``; in UTF-16, of
    ``order``, the first such unit), looking from ``since`` on (before it, none); None if
    not within ``head``."""
    since = max(since, 0)
    if order is None:
        found = [i for i in (head.find(b"\n", since), head.find(b"\r", since)) if i >= 0]
        return min(found) if found else None
    units = np.frombuffer(head[: len(head) & ~1], dtype=order + "u2")[since // 2 :]
    breaks = np.flatnonzero((units == split_reader.LF) | (units == split_reader.CR))
    return (since // 2 + int(breaks[0])) * 2 if len(breaks) else None


def header_columns(line: str, cfg: ReadOptions) -> list[str]:
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


def _declared_schema(cfg: ReadOptions) -> StructType | None:
    """``--schema``: the types of the columns it names (the others are text)."""
    if not cfg.schema:
        return None
    text = Path(cfg.schema).read_text() if os.path.isfile(cfg.schema) else cfg.schema
    try:
        schema = StructType.fromDDL(text.strip())
    except Exception as e:
        raise UsageError(f"--schema: not a valid Spark DDL schema ({str(e).splitlines()[0][:200]})") from e
    if not isinstance(schema, StructType):
        raise UsageError("--schema: expected column definitions, e.g. 'id INT, name STRING'")
    return schema


def _text_schema(columns: tuple[str, ...]) -> StructType:
    """A header's read schema, in its order, every column text."""
    return StructType([StructField(c, StringType()) for c in columns])


def _check_columns(cfg: ReadOptions, headers: tuple[Header, ...], declared: StructType | None) -> None:
    """The columns the options name exist: a key or event-time column in every file,
    each ``--schema`` column in some file."""
    for name, what in ((cfg.key_column, "--key-column"), (cfg.event_time_column, "--event-time-column")):
        if name is None:
            continue
        lacking = [h for h in headers if name not in h.columns]
        if len(lacking) == len(headers):
            raise UsageError(f"{what} {name!r}: no such column; the columns are {', '.join(headers[0].columns)}")
        if lacking:
            files = [f for h in lacking for f in h.files]
            raise InputError(f"{what} {name!r}: not in the header of {len(files)} file(s): {', '.join(files[:3])}"
                             f"{' ...' if len(files) > 3 else ''}; every file needs it")  # fmt: skip
    if declared is not None:
        known = {c for h in headers for c in h.columns}
        unknown = [f.name for f in declared.fields if f.name not in known]
        if unknown:
            raise UsageError(f"--schema names {', '.join(unknown)}, in no input file's header;"
                             f" the columns are {', '.join(headers[0].columns)}")  # fmt: skip


# What Spark's parses of time text take from the session as their DataFrame is made, and
# what kappa-ingest's typing reads: zone-less text as UTC, an offset where the text has one.
TIME_SETTINGS = {"spark.sql.session.timeZone": "UTC", "spark.sql.timestampType": "TIMESTAMP_LTZ"}
_time_settings_held = threading.Lock()  # (a session's settings are every thread's)


@contextmanager
def _utc_session(spark: SparkSession) -> Iterator[None]:
    """The session's time settings kappa-ingest's while a plan is made: Spark reads a time
    without a zone in the session's zone (and, with TIMESTAMP_NTZ, ignores an offset),
    kappa-ingest's typing (the records' timestamps, their keys) as UTC. Each parse of time
    text takes them from the session as its DataFrame is made (and analysed), and keeps
    them: Spark's reader then sorts and parts rows by the times their records carry, in a
    session of any zone (a notebook's in New York, whose clocks skip from 02:00 to 03:00
    on a March night, would sort 02:30 after 03:15). The session's own are restored."""
    with _time_settings_held:
        was = {name: spark.conf.get(name, None) for name in TIME_SETTINGS}
        changed = {name: v for name, v in TIME_SETTINGS.items() if was[name] != v}
        for name, value in changed.items():
            spark.conf.set(name, value)
        try:
            yield
        finally:
            for name in changed:
                if was[name] is None:
                    spark.conf.unset(name)
                else:
                    spark.conf.set(name, was[name])


def _spark_csv(
    spark: SparkSession,
    cfg: ReadOptions,
    groups: list[tuple[list[str], StructType]],
    pinned: Plan | None,
    types: dict[str, DataType],
) -> tuple[DataFrame, int, int, bool, str]:
    """Spark's CSV reader, one read per distinct header (each file's columns named by its
    own header) united by column name, repartitioned to ``--partitions``; with the parts
    per split (``pinned``: a resumed run keeps its original's, made the same way), the
    number of tasks, whether the rows were shuffled and what parted them. ``types``: the
    declared types (an ordered replay's typed key is parted by its value)."""
    parts = pinned.parts if pinned is not None else None
    skipped_by_spark([p for group, _ in groups for p in group])
    options = {**reader_options(cfg), "enforceSchema": "true"}  # each read's schema is its files' header
    frames = []
    for paths, schema in groups:
        read_schema = StructType([*schema.fields, StructField(CORRUPT_COL, StringType())])
        frames.append(
            spark.read.schema(read_schema)
            .options(**options)
            .csv(paths)
            .select(
                "*",
                F.col("_metadata.file_path").alias(FILE_COL),
                F.col("_metadata.file_block_start").alias(BLOCK_COL),
                F.col("_metadata.file_block_length").alias(BLOCK_LEN_COL),
                # Before the union: over these files' own columns in their own order.
                F.hash(*[F.col(f.name) for f in schema.fields], F.col(CORRUPT_COL)).alias(ROW_HASH_COL),
            )
        )
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other, allowMissingColumns=True)
    if _sorted_by_event_time(cfg):  # what Spark sorts by (the records' event time is typed.py's)
        col = F.col(cfg.event_time_column)
        fmt = cfg.event_time_format
        df = df.withColumn(EVENT_TS_COL, F.try_to_timestamp(col, F.lit(fmt)) if fmt else F.try_to_timestamp(col))
    union = {f.name: f for _, schema in groups for f in schema.fields}
    df = df.withColumn(REJECT_COL, reject_reason(StructType(list(union.values())), cfg))
    by_event_time = [F.col(EVENT_TS_COL), F.col(FILE_COL), F.col(BLOCK_COL)]
    if cfg.order_by_event_time and cfg.key_column:
        # Each key's rows in one task (a unit is then one part of a split, as in any
        # shuffle), sorted by event time: its partition gets them in that order.
        parts = parts or cfg.partitions or spark.sparkContext.defaultParallelism
        key, by = F.col(cfg.key_column), splits.BY_ROWS
        # A typed key's texts of one value ("007", "7") are one record key: parted by the
        # value (runs planned before: by the text).
        typed_key = cfg.key_column in types and not isinstance(types[cfg.key_column], StringType)
        if typed_key and not (pinned is not None and pinned.parts_by in ("", splits.BY_ROWS)):
            key, by = key.try_cast(types[cfg.key_column]), splits.BY_KEY_VALUES
        df = df.repartition(parts, key).sortWithinPartitions(*by_event_time)
        return df.drop(ROW_HASH_COL), parts, parts, True, by
    partitions = None if cfg.incremental or _split_per_task(cfg) else cfg.partitions
    df, parts, tasks = _repartition(df, partitions, parts)
    if cfg.replay_speed:  # paced by event time: each task's rows in that order
        df = df.sortWithinPartitions(*by_event_time)
    return df.drop(ROW_HASH_COL), parts, tasks, parts > 1, splits.BY_ROWS


def reject_reason(schema: StructType, cfg: ReadOptions) -> Column:
    """Why Spark's parsed row must be quarantined, or null."""
    text_cols = [F.col(f.name) for f in schema.fields if isinstance(f.dataType, StringType)]
    reason = F.when(F.col(CORRUPT_COL).isNotNull(), F.lit(REASON_MALFORMED))
    if text_cols:
        has_replacement = F.instr(F.concat_ws("", *text_cols), REPLACEMENT_CHAR) > 0
        reason = reason.when(has_replacement, F.lit(f"bytes not valid in {cfg.encoding} (decoded as U+FFFD)"))
    if _sorted_by_event_time(cfg):
        # A row Spark cannot sort by its event time is quarantined, not sent out of order;
        # the reasons read as typed.py's.
        name = cfg.event_time_column
        fmt = f" in format {cfg.event_time_format!r}" if cfg.event_time_format else ""
        empty = F.col(name).isNull() | F.col(name).isin(*cfg.null_values) if cfg.null_values else F.col(name).isNull()
        reason = reason.when(empty, F.lit(f"{name}: empty, and it is the event time"))
        reason = reason.when(
            F.col(EVENT_TS_COL).isNull(),
            F.concat(F.lit(f"{name}: '"), F.col(name), F.lit(f"' is not a timestamp{fmt}")),
        )
    return reason


def _repartition(df: DataFrame, partitions: int | None, parts: int | None) -> tuple[DataFrame, int, int]:
    """Exactly ``partitions`` producers: coalesce when the scan splits finer, shuffle only
    when it cannot split as fine (gzip and multiline files are one split each). The
    shuffle hashes each row over its own file's columns (ROW_HASH_COL), so a row lands in
    the same part in every run, whatever files are read beside it; ``parts``, when given,
    is kept whatever the scan's split."""
    current = df.rdd.getNumPartitions()
    if parts is None:
        parts = partitions if partitions is not None and current < partitions else 1
    if parts > 1:
        return df.repartition(parts, F.col(ROW_HASH_COL)), parts, parts
    if partitions is not None and current > partitions:
        return df.coalesce(partitions), 1, partitions
    return df, 1, current
