"""Input splits: the pieces of input the delivery ledger records as delivered.

Spark reads a file in splits of ``split_bytes`` (at offsets 0, S, 2S, ...); a ``.csv.gz``
file, or any file read with ``--multiline``, is one split. Left to itself Spark derives
the split size from the total input and the cores, so a run over fewer files (a resumed
one) would split the same file differently. kappa-ingest fixes it instead
(:func:`spark_conf`): a file's splits then depend only on its size and ``split_bytes``,
which the run records, so a resumed run reads exactly the splits of the run it resumes.

When ``--partitions`` asks for more producers than the files split into, the rows are
hash-partitioned over ``parts`` tasks (deterministically: Spark's murmur3 of the row), and
a unit of delivery is one part of one split.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from urllib.parse import unquote, urlparse

from kappa_ingest.errors import InputError

# Spark's own default for spark.sql.files.maxPartitionBytes / openCostInBytes.
MAX_SPLIT_BYTES = 128 << 20
OPEN_COST_BYTES = 4 << 20
# The split size of --incremental runs: a function of nothing a run chooses, so that two
# scheduled runs over one new file cut it into the same units (and, writing a unit under the
# same transactional id, never both commit it). About a second of sending per unit here.
INCREMENTAL_SPLIT_BYTES = 64 << 20
# With --partitions, a task's share larger than this (--split-size) is cut into units
# (splits) of about equal size, at most this large, each its own transaction: a unit's
# commit (its queue draining, on a long link for as long as its rows took to convert) then
# runs beside the next unit's sending (sinks.writers.Committing), and a unit's transaction
# stays short.
UNIT_BYTES = 64 << 20


@dataclass(frozen=True, order=True)
class Unit:
    """One unit of delivery: part ``part`` of ``parts`` of the byte range ``[start, start + length)`` of ``file``."""

    file: str  # canonical_file(): a local absolute path, or a URI
    start: int
    length: int
    part: int = 0
    parts: int = 1

    def label(self) -> str:
        name = f"{self.file} [{self.start:,}, {self.start + self.length:,})"
        return name + (f" part {self.part + 1}/{self.parts}" if self.parts > 1 else "")


@dataclass(frozen=True)
class InputFile:
    path: str  # canonical_file()
    size: int
    mtime_ms: int
    splittable: bool
    version: str = ""  # an object's ETag (a local file has none): with size and mtime, which object it is

    def identity(self) -> tuple[int, int, str]:
        """What a ledger entry of the file must match to count it as this file (Entry.matches)."""
        return self.size, self.mtime_ms, self.version


BY_LINES = "lines"  # a hash of the raw line (or, ordered, of the key's text as Arrow parses it)
BY_KEYS = "kafka-keys"  # ordered, on the line path: Kafka's partition of the record's key among the parts
BY_ROWS = "rows"  # a hash of the row Spark's CSV reader parsed (or of its key column's text)
BY_KEY_VALUES = "key-values"  # ordered, on Spark's reader: a hash of the typed key column's value


@dataclass(frozen=True)
class Plan:
    """The units a run reads: its files (with size and modification time), the split size
    and the parts per split."""

    files: tuple[InputFile, ...]
    split_bytes: int
    parts: int = 1
    parts_by: str = ""  # with parts > 1, what put a row in its part: BY_LINES, BY_KEYS, BY_ROWS or BY_KEY_VALUES

    def splits(self, f: InputFile) -> list[tuple[int, int]]:
        """``(start, length)`` of each split of ``f``, as Spark's file scan makes them."""
        if not f.splittable or f.size <= self.split_bytes:
            return [(0, f.size)]
        return [(start, min(self.split_bytes, f.size - start)) for start in range(0, f.size, self.split_bytes)]

    def units(self) -> list[Unit]:
        return [
            Unit(f.path, start, length, part, self.parts)
            for f in self.files
            for start, length in self.splits(f)
            for part in range(self.parts)
        ]

    def file(self, path: str) -> InputFile | None:
        return next((f for f in self.files if f.path == path), None)

    def changed(self) -> list[tuple[InputFile, InputFile | None]]:
        """Files whose size or modification time (ms), or objects whose ETag, is no longer
        the plan's, with what they are now (None: gone). Other remote files are checked
        once Spark lists them."""
        out: list[tuple[InputFile, InputFile | None]] = []
        for f in self.files:
            if "://" in f.path and not f.version:
                continue
            try:
                now = _object_now(f) if f.version else local_file(f.path, not f.splittable)
            except OSError:  # (gone: a store out of reach raises StoreUnavailable instead)
                out.append((f, None))
                continue
            if now.identity() != f.identity():
                out.append((f, now))
        return out

    def to_json(self) -> dict:
        return {"split_bytes": self.split_bytes, "parts": self.parts, "parts_by": self.parts_by,
                "files": [asdict(f) for f in self.files]}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict) -> Plan:
        parts = int(d.get("parts", 1))
        # Plans from before the line path shuffled: parts were always Spark's parsed rows'.
        by = d.get("parts_by", BY_ROWS if parts > 1 else "")
        return cls(tuple(InputFile(**f) for f in d["files"]), int(d["split_bytes"]), parts, by)


def canonical_file(spark_path: str) -> str:
    """The ledger's name of a file: Spark's ``file:/a%20b/c.csv`` is ``/a b/c.csv``, an
    object's ``s3a://b/k.csv`` is ``s3://b/k.csv``; other URIs stay as Spark gives them."""
    if spark_path.startswith("file:"):
        return unquote(urlparse(spark_path).path)
    if spark_path.startswith("s3a://"):
        return "s3://" + spark_path.removeprefix("s3a://")
    if "://" not in spark_path and not spark_path.startswith("/"):
        return os.path.abspath(spark_path)
    return spark_path


def splittable(path: str, multiline: bool) -> bool:
    """Whether Spark splits the file: not gzip (no splittable codec), not multiline CSV."""
    return not multiline and not path.endswith(".gz")


def _object_now(f: InputFile) -> InputFile:
    """An object as its HEAD says it is now; FileNotFoundError if it is gone."""
    from kappa_ingest.errors import InputError

    try:
        return object_file(f.path, not f.splittable)
    except InputError as e:
        raise FileNotFoundError(f.path) from e


def object_file(uri: str, multiline: bool) -> InputFile:
    """An object's size, modification time and ETag, from its HEAD (the driver's store)."""
    from kappa_ingest.s3.objects import head
    from kappa_ingest.source.opening import store

    o = head(uri, store().access.quick())
    return InputFile(o.uri, o.size, o.mtime_ms, splittable(o.uri, multiline), o.etag)


def local_file(path: str, multiline: bool) -> InputFile:
    st = os.stat(path)
    canonical = canonical_file(path)
    return InputFile(canonical, st.st_size, st.st_mtime_ns // 1_000_000, splittable(canonical, multiline))


def default_split_bytes(
    sizes: Iterable[int], partitions: int | None, parallelism: int, unit_bytes: int | None = None
) -> tuple[int, int]:
    """``(split_bytes, open_cost_bytes)`` for a run: about ``partitions`` splits when given
    (no open cost, so small files pack by bytes alone), each share cut into units of at
    most ``unit_bytes`` of about equal size where given (a task's splits sent one after
    another); else Spark's own rule (FilePartition.maxSplitBytes: total bytes plus an open
    cost per file, over the cores, between 4 MB and 128 MB)."""
    sizes = list(sizes)
    total = sum(sizes)
    if partitions:
        share = max(4096, -(-total // partitions))
        if unit_bytes and share > unit_bytes:
            share = max(4096, -(-share // -(-share // unit_bytes)))
        return share, 0
    per_core = (total + OPEN_COST_BYTES * len(sizes)) // max(1, parallelism)
    return min(MAX_SPLIT_BYTES, max(OPEN_COST_BYTES, per_core)), OPEN_COST_BYTES


LISTED_ON_THE_DRIVER = 100_000  # input paths Spark lists itself rather than in a job of its own


# A task's own start-up (its ledger reader, its Spark and Python round trips), in the time
# of a small file's send: what a task per file would pay on every file.
TASK_COST_FILES = 3


def spark_packing(sizes: list[int], split_bytes: int, open_cost: int) -> list[int]:
    """How many files each task holds as Spark 4 packs whole files (``FilePartition.
    getFilePartitions``: largest first, a task closed when the next file would take it past
    ``split_bytes``, each file before counted with the open cost)."""
    tasks: list[int] = []
    files, size = 0, 0
    for s in sorted(sizes, reverse=True):
        if files and size + s > split_bytes:
            tasks.append(files)
            files, size = 0, 0
        files += 1
        size += s + open_cost
    return [*tasks, files] if files else tasks


def ingest_packing(sizes: list[int], cores: int) -> list[int]:
    """How many files each task holds where ``ingest`` reads these files (whole, at its own split size)."""
    return spark_packing(sizes, default_split_bytes(sizes, None, cores)[0], OPEN_COST_BYTES)


def waves_open_cost(sizes: list[int], split_bytes: int, cores: int) -> int:
    """The open cost that makes Spark pack small files (a watch batch's) into tasks of as
    many files as make the batch shortest on ``cores``: waves of tasks x (the most files
    a task holds + a task's own cost), by Spark's packing of these files, Spark's own open
    cost among the choices and none with more files a task than ``ingest`` or Spark's own
    would pack (a 250-file batch of 432 KB files was 17 tasks at Spark's own, 16 of 15 and the
    last of 10 running alone while the other core idled; then 18 with a cap of 15; now 10 of
    25, as ``ingest`` packs 29)."""
    n = len(sizes)
    if n == 0:
        return OPEN_COST_BYTES
    sizes = sorted(sizes, reverse=True)
    small, large = sizes[-1], sizes[0]
    most = max(*ingest_packing(sizes, cores), *spark_packing(sizes, split_bytes, OPEN_COST_BYTES))
    choices = {OPEN_COST_BYTES, max(0, split_bytes - small)}  # Spark's own; a file a task
    for q in range(2, most + 1):
        fits = (split_bytes - q * large) / (q - 1)  # q files fit, even the largest
        if fits < 0:
            break
        spills = (split_bytes - (q + 1) * small) / q  # a q+1-th does not, even of the smallest
        choices.add(max(0, int((fits + spills) / 2) if spills < fits else int(fits)))

    def batch_time(cost: int) -> tuple[float, int]:
        tasks = spark_packing(sizes, split_bytes, cost)
        if max(tasks) > most:
            return float("inf"), 0
        return -(-len(tasks) // cores) * (max(tasks) + TASK_COST_FILES), len(tasks)  # a tie: fewer tasks

    return min(sorted(choices), key=batch_time)


def spark_conf(split_bytes: int, open_cost_bytes: int, local: bool = False) -> dict[str, str]:
    """Settings that make Spark's file scan split at exactly ``split_bytes``: with one
    minimum partition its bytes-per-core term is the whole input, so the split size is
    maxPartitionBytes whenever the input is larger, and no file is split otherwise."""
    return {
        "spark.sql.files.maxPartitionBytes": str(split_bytes),
        "spark.sql.files.minPartitionNum": "1",
        "spark.sql.files.openCostInBytes": str(open_cost_bytes),
        # Local files the run names, each already looked at by the planner: with more than 32,
        # Spark would run a job to list them (1.9 s of a watch batch of 250 files, 0.1 s
        # without). Remote ones are still listed in parallel (a round trip each).
        "spark.sql.sources.parallelPartitionDiscovery.threshold": str(LISTED_ON_THE_DRIVER if local else 32),
    }


def changed_what(planned: InputFile, now: InputFile | None) -> str:
    """How a file differs from its plan, in a few words."""
    if now is None:
        return "deleted or moved"
    if now.size != planned.size:
        return f"size {planned.size:,} -> {now.size:,} bytes"
    if now.version != planned.version:
        return f"overwritten, ETag {planned.version} -> {now.version}"
    return f"modified {now.mtime_ms - planned.mtime_ms:,} ms after it was planned, same size"


def changed_input(plan: Plan, run_id: str) -> InputError | None:
    """The first local input file whose size or modification time is no longer the plan's
    (or that is gone): it changed while the run read it, so what was sent of it may be
    incomplete or mixed. Remote files are not checked."""
    for planned, now in plan.changed():
        what = changed_what(planned, now)
        return InputError(
            f"input {planned.path} changed while the run read it ({what}): its rows in the topic (run_id {run_id})"
            " may be incomplete or mixed; send it again once nothing writes to it"
            " (with --incremental: --on-changed resend)"
        )
    return None
