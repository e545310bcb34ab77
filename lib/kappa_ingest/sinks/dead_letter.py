"""``--dead-letter-topic``: every quarantined row also goes to a topic, as Kafka Connect's
dead-letter queue does (``errors.deadletterqueue.topic.name``), so that a stream consumer
can repair and replay it.

A dead letter's value is the row's raw bytes as read (on the Spark CSV reader's path, the
text Spark kept, or the fields it parsed as JSON); its
headers say where it came from and why: ``run_id``, ``source_file``, ``reason``,
``split_start`` (the byte offset of the input split it was read in), ``record_in_split``
(its 1-based position among the split's lines, or among Spark's records on the Spark CSV
reader's path) and, for the first split of a file on the line path, ``line_number``.
Dead letters travel through the task's own producer, in its transaction in exactly-once
mode: a row is either sent or dead-lettered, once.
"""

from __future__ import annotations

import pyarrow as pa

from kappa_ingest.source.columns import LINE_COL
from kappa_ingest.source.parsing import Parsed
from kappa_ingest.source.splits import Unit

Headers = list[tuple[str, bytes]]


def records(
    rows: pa.RecordBatch, parsed: Parsed, unit: Unit, before: int, run_id: str, counts_lines: bool
) -> list[tuple[bytes, Headers]]:
    """The dead letters of ``rows``, one parsed piece of ``unit``; ``before``: the unit's
    lines (or records) already processed, so that positions count from the split's start."""
    rejects = parsed.rejects
    if rejects.num_rows == 0:
        return []
    at = parsed.reject_at if parsed.reject_at is not None else range(rejects.num_rows)
    if counts_lines and parsed.reject_at is not None:  # the line as read, undecodable bytes and all
        values = rows.column(LINE_COL).take(pa.array(parsed.reject_at)).cast(pa.binary()).to_pylist()
    else:
        values = [(text or "").encode() for text in rejects.column("line").to_pylist()]
    out = []
    for pos, file, reason, value in zip(
        at, rejects.column("source_file").to_pylist(), rejects.column("reason").to_pylist(), values, strict=True
    ):
        index = before + int(pos) + 1
        headers: Headers = [("run_id", run_id.encode()), ("source_file", (file or "").encode()),
                            ("reason", (reason or "").encode()), ("split_start", str(unit.start).encode())]  # fmt: skip
        if unit.parts == 1:  # shuffled rows (--partitions beyond the splits) have no position
            headers.append(("record_in_split", str(index).encode()))
            if counts_lines and unit.start == 0:
                headers.append(("line_number", str(index).encode()))
        out.append((value or b"", headers))
    return out
