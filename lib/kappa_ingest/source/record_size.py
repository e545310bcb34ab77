"""Records too large for Kafka: found on the executors, as each batch is parsed, before
anything is sent.

Kafka refuses a record larger than the smaller of two limits: the topic's
``max.message.bytes`` (a topic the run creates gets 16 MiB, room for large batches, where the
brokers' ``message.max.bytes``, 1,048,588 by default, is less; 8 MiB where a managed
cluster refuses more) and the producer's largest request (``max.request.size``: librdkafka's
``message.max.bytes``, 1,000,000 by default, for the ``confluent`` sink; 1,048,576 for the
Java and kafka-python clients). A record's size here is what it puts on the wire
uncompressed: key, value, header names and values (``run_id``, ``source_file`` and, for
the ``spark`` sink, the timestamp header), plus ``FRAMING_BYTES`` for the record batch
around it (61 bytes of batch header and at most ~55 of varints; rounded up). It is
checked before compression, so a record that only compression would have brought under
the limit is refused too: the same rows pass or not whatever the codec and batching.

:class:`SizeChecked` wraps the run's parser: a clean row whose record would be too large
is moved to the rejects, its reason ``record of N bytes exceeds the topic's
max.message.bytes (L)``. Being part of the parser, every pass that parses (the sinks,
the quarantine writer, dead letters, the ledger's tallies) sees the same rows rejected,
so ``rows_read = rows_sent + rows_quarantined`` holds. With ``--strict-size`` such a row
fails the run instead (:class:`RecordTooLarge`, exit 3, naming its file and line).

Most rows are far below the limit: an upper bound of each row's record from its raw bytes
(every byte escaped as ``\\u00XX`` at worst) settles them without encoding; only rows
whose bound exceeds the limit are encoded to measure them exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kappa_ingest.source.columns import FILE_COL, LINE_COL
from kappa_ingest.source.parsing import Wrapping
from kappa_ingest.source.typed import materialized

FRAMING_BYTES = 128
BROKER_MAX_DEFAULT = 1_048_588  # Kafka's message.max.bytes
PRODUCER_MAX_DEFAULT = {"confluent": 1_000_000, "kafka-python": 1_048_576, "spark": 1_048_576}
RUN_ID_HEADER, FILE_HEADER = "run_id", "source_file"
TIMESTAMP_HEADER_BYTES = len("__kappa_ts") + 8  # the spark sink's (records.TIMESTAMP_HEADER)
ESCAPED = 6  # the longest JSON escape of one byte: \u00XX
TYPED_VALUE_BYTES = 40  # the longest JSON text of a typed value (number, boolean, ISO time)


@dataclass(frozen=True)
class Limit:
    """The largest record Kafka takes for this run, and which setting says so."""

    bytes: int
    what: str  # e.g. "the topic's max.message.bytes"

    def reason(self, size: int) -> str:
        return f"record of {size:,} bytes exceeds {self.what} ({self.bytes:,})"


def producer_max(sink: str, settings: dict[str, str]) -> int:
    """The producer's largest request: ``max.request.size`` if set, else the client's default."""
    given = settings.get("max.request.size")
    return int(given) if given else PRODUCER_MAX_DEFAULT[sink]


def limit(sink: str, settings: dict[str, str], topic_max: int | None) -> Limit:
    """The smaller of the topic's ``max.message.bytes`` (None: not known, as in a dry run)
    and the producer's largest request."""
    producer = producer_max(sink, settings)
    if topic_max is not None and topic_max < producer:
        return Limit(topic_max, "the topic's max.message.bytes")
    return Limit(producer, "the producer's max.request.size")


def topic_max(admin: Any, topic: str, topic_config: dict[str, str] | None = None) -> int:
    """The topic's ``max.message.bytes``; for a topic not there yet, what the run will
    create it with (its configs, else the brokers' ``message.max.bytes``)."""
    value = admin.topic_setting(topic, "max.message.bytes")
    if value is None:
        value = (topic_config or {}).get("max.message.bytes") or admin.broker_setting("message.max.bytes")
    return int(value) if value else BROKER_MAX_DEFAULT


def header_bytes(run_id: str, sink: str) -> int:
    """Header bytes of every record but the file's name (added per row)."""
    fixed = len(RUN_ID_HEADER) + len(run_id.encode()) + len(FILE_HEADER)
    return fixed + (TIMESTAMP_HEADER_BYTES if sink == "spark" else 0)


class RecordTooLarge(ValueError):
    """``--strict-size``: a row whose record Kafka would refuse (raised in a task; the
    driver maps it to exit 3). ``position``: the row's place in the parsed piece, until
    :meth:`located` says where it is in its file."""

    def __init__(self, file: str, position: int, size: int, limit: Limit, where: str | None = None) -> None:
        self.file, self.position, self.size, self.limit = file, position, size, limit
        where = where or f"row {position + 1} of a batch"
        super().__init__(
            f"input {file}, {where}: {limit.reason(size)}; --strict-size refuses the run"
            " (without it such a row is quarantined and the rest sent)"
        )

    def located(self, split_start: int, before: int, counts_lines: bool) -> RecordTooLarge:
        """The same error, its row named by line (or Spark record) in its file or split;
        ``before``: lines (records) of the split processed before this piece."""
        index = before + self.position + 1
        unit = "line" if counts_lines else "record"
        if split_start == 0:
            where = f"line {index:,}" if counts_lines else f"data record {index:,}"
        else:
            where = f"{unit} {index:,} of the split at byte {split_start:,}"
        return RecordTooLarge(self.file, self.position, self.size, self.limit, where)


@dataclass
class SizeChecked(Wrapping):
    """A parser whose clean rows all fit in a Kafka record: a row that does not is moved
    to the rejects (or, ``strict``, raises :class:`RecordTooLarge`)."""

    inner: Any  # a kappa_ingest.source.parsing.BatchParser
    spec: Any  # kappa_ingest.source.records.RecordSpec
    limit: Limit
    fixed_header_bytes: int  # header_bytes(run_id, sink)
    strict: bool = False

    def fresh(self) -> SizeChecked:
        return SizeChecked(self.inner.fresh(), self.spec, self.limit, self.fixed_header_bytes, self.strict)

    def __call__(self, batch: pa.RecordBatch) -> Any:
        parsed = self.inner(batch)
        rows = parsed.rows
        if rows.num_rows == 0:
            return parsed
        candidates = np.flatnonzero(self.upper_bounds(batch, parsed) > self.limit.bytes)
        if len(candidates) == 0:
            return parsed
        sizes = self.sizes(rows.take(pa.array(candidates)), parsed.columns)
        over = candidates[sizes > self.limit.bytes]
        if len(over) == 0:
            return parsed
        too_large = sizes[sizes > self.limit.bytes]
        files = rows.column(FILE_COL).take(pa.array(over))
        if self.strict:
            from kappa_ingest.source.splits import canonical_file

            raise RecordTooLarge(canonical_file(str(files[0].as_py())), int(parsed.row_at[over[0]]),
                                 int(too_large[0]), self.limit)  # fmt: skip
        return moved(parsed, batch, over, [self.limit.reason(int(s)) for s in too_large])

    def upper_bounds(self, batch: pa.RecordBatch, parsed: Any) -> np.ndarray:
        """Per clean row, a size its record cannot exceed: JSON text of at most ``ESCAPED``
        bytes per input byte, plus the names, the file and the headers."""
        rows = parsed.rows
        if LINE_COL in batch.schema.names and parsed.row_at is not None:
            lengths = pc.binary_length(batch.column(LINE_COL)).fill_null(0)
            raw = np.asarray(lengths, dtype=np.int64)[parsed.row_at]  # a line holds its values and more
        else:
            raw = np.zeros(rows.num_rows, dtype=np.int64)
            for name in parsed.columns or self.spec.columns:
                col = rows.column(name)
                if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_binary(col.type):
                    raw += np.asarray(pc.binary_length(col).fill_null(0), dtype=np.int64)
                else:
                    raw += TYPED_VALUE_BYTES
        names = sum(len(c.encode()) for c in (parsed.columns or self.spec.columns))
        files = rows.column(FILE_COL)
        longest_file = pc.max(pc.binary_length(files.cast(pa.string()))).as_py() or 0
        fixed = (FRAMING_BYTES + self.fixed_header_bytes + 200 + TYPED_VALUE_BYTES + (ESCAPED + 1) * longest_file
                 + ESCAPED * names + 8 * len(parsed.columns or self.spec.columns))  # fmt: skip
        return fixed + (ESCAPED + 1) * raw  # the key (a value's text) counted again

    def sizes(self, rows: pa.RecordBatch, columns: tuple[str, ...]) -> np.ndarray:
        """Each row's record size, exactly: encoded as the sinks encode it (the time stamp
        has a fixed width), key and headers added."""
        from kappa_ingest.source.records import encode_batch

        enc = encode_batch(rows, self.spec.with_columns(columns), 0)
        total = np.asarray(pc.binary_length(enc.values).fill_null(0), dtype=np.int64)
        if enc.keys is not None:
            total += np.asarray(pc.binary_length(enc.keys).fill_null(0), dtype=np.int64)
        total += np.asarray(pc.binary_length(enc.source_files.cast(pa.string())).fill_null(0), dtype=np.int64)
        return total + self.fixed_header_bytes + FRAMING_BYTES


def moved(parsed: Any, batch: pa.RecordBatch, which: np.ndarray, reasons: list[str]) -> Any:
    """``parsed`` with its clean rows ``which`` (indices into them) moved to the rejects,
    with their text: the line as read, or (rows Spark parsed) their fields as JSON."""
    import json

    from kappa_ingest.source.parsing import Parsed, reject_batch

    rows = parsed.rows
    at = parsed.row_at[which]
    if LINE_COL in batch.schema.names:  # a clean row's line is valid UTF-8: no Python copy of it
        text = batch.column(LINE_COL).take(pa.array(at)).cast(pa.string())
    else:
        picked = materialized(rows.take(pa.array(which)).select(list(parsed.columns)))
        text = pa.array([json.dumps(r, default=str) for r in picked.to_pylist()], pa.string())
    out = reject_batch(rows.column(FILE_COL).take(pa.array(which)).cast(pa.string()), pa.array(reasons, pa.string()),
                       text)  # fmt: skip
    rejects = pa.Table.from_batches([parsed.rejects, out]).combine_chunks().to_batches()[0]
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[which] = False
    before = parsed.reject_at if parsed.reject_at is not None else np.arange(0)
    return Parsed(rows.filter(pa.array(keep)), rejects, parsed.skipped, np.concatenate([before, at]), parsed.columns,
                  parsed.row_at[keep], parsed.failed)  # fmt: skip


# A batch of the confluent sink, unless --kafka-opt batch.size says otherwise: as large as the
# topic takes, up to 16 MiB, the room a topic the run creates gets. librdkafka's idempotent
# producer sends a partition's next batch only once the broker has answered for the last, so
# on a long round trip a batch must hold a whole round trip's records (`make links`, 100 ms:
# 1 MB batches 0.29x of the unshaped rate, 8 MB 0.83x; 16 MB took a 1M-row run's sending
# stage from 5.97 s to 5.25 s, 32 MB no further). On a local broker they cost nothing: 0.96x
# the CPU a debs2012 row of 8 MB batches, 1.06x the rate (medians of four rounds' pairs,
# bench-results/20261127T211634Z), and linger.ms sends a batch long before it fills.
BATCH_BYTES = 16 * 1024 * 1024
# What a managed cluster lets a topic take at most (Confluent Cloud refuses more, a policy
# violation): a topic the run creates there gets this instead, and the batches follow it.
MANAGED_ROOM = 8 * 1024 * 1024
# The other sinks' batches: the Java producer splits a batch the broker refuses, and
# kafka-python cannot fill a larger one.
_BATCH_SIZE_DEFAULT = {"confluent": BATCH_BYTES, "kafka-python": 1024 * 1024, "spark": 1024 * 1024}


def batches_within(settings: dict[str, str], sink: str, topic_max: int) -> dict[str, str]:
    """The producer settings with batch.size as given, else the sink's default, within the
    topic's max.message.bytes: a batch larger than that is refused whole by the broker
    (librdkafka does not split it)."""
    batch = int(settings.get("batch.size", _BATCH_SIZE_DEFAULT[sink]))
    return {**settings, "batch.size": str(min(batch, max(1, topic_max - FRAMING_BYTES)))}


def created_topic_config(topic_config: dict[str, str], broker_max: int, room: int = BATCH_BYTES) -> dict[str, str]:
    """The configs of a topic the run creates: the user's, and ``room`` for batches where the
    brokers' message.max.bytes leaves less (records stay within max.request.size)."""
    if "max.message.bytes" in topic_config or broker_max >= room:
        return topic_config
    return {**topic_config, "max.message.bytes": str(room)}
