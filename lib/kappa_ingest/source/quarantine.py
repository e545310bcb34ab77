"""Rows that cannot be sent faithfully, written with their file and reason under
``<metrics-dir>/runs/<run_id>/quarantine/`` as JSON lines: ``source_file``, ``reason`` and
``line`` (the raw text; for a row Spark decoded but could not keep, its fields as JSON).

A local directory is written by Spark's JSON writer (its commit protocol). A metrics
directory in a store (which this project's Spark has no filesystem for) is written by the
tasks themselves: each its own ``part-NNNNN.json``, named by its partition, so a task run
again writes the same object again rather than a second one.
"""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from collections.abc import Callable, Iterator

import polars as pl
import pyarrow as pa

from kappa_ingest.s3.directory import Directory
from kappa_ingest.source.dataframe import Source
from kappa_ingest.source.parsing import REJECT_DDL
from kappa_ingest.source.splits import Unit
from kappa_ingest.source.task_input import parsed_units


def write(source: Source, where: Directory, skip: frozenset[Unit] = frozenset()) -> dict[str, int]:
    """Write the rejected rows into ``where``, parsed by the same parser the sink used (units
    in ``skip``, delivered before this run, left out); their count by reason, read back
    from what was written."""
    parser, parts, ordered = source.parser, source.plan.parts, source.ordered

    def rejects(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for parsed in parsed_units(batches, parser, parts, skip, ordered):
            if parsed.rejects.num_rows:
                yield parsed.rejects

    if where.in_store:
        return _write_to_store(source, where, rejects)
    path = where.root
    source.df.mapInArrow(rejects, REJECT_DDL).write.mode("overwrite").json(path)
    written = source.df.sparkSession.read.schema(REJECT_DDL).json(path)
    return {r["reason"]: r["count"] for r in written.groupBy("reason").count().orderBy("reason").collect()}


def _write_to_store(
    source: Source, where: Directory, rejects: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
) -> dict[str, int]:
    def write_part(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        with contextlib.ExitStack() as stack:
            out = None  # opened at the first reject: a partition without any writes no object
            for batch in rejects(batches):
                if out is None:
                    out = stack.enter_context(where.open_output(f"part-{ctx.partitionId():05d}.json"))
                buf = io.BytesIO()
                pl.from_arrow(batch).write_ndjson(buf)  # type: ignore[union-attr]
                out.write(buf.getvalue())
        yield pa.RecordBatch.from_pydict({"written": [1]})

    source.df.mapInArrow(write_part, "written long").collect()
    counts: Counter[str] = Counter()
    for name in where.files():
        data = where.read_bytes(name)
        if data:
            written = pl.read_ndjson(io.BytesIO(data), schema={n: pl.String for n in ("source_file", "reason", "line")})
            counts.update(dict(written["reason"].value_counts().rows()))
    return dict(sorted(counts.items()))
