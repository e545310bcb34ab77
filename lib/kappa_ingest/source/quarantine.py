"""Rows that cannot be sent faithfully, written with their file and reason under
``<metrics-dir>/runs/<run_id>/quarantine/`` as JSON lines: ``source_file``, ``reason`` and
``line`` (the raw text; for a row Spark decoded but could not keep, its fields as JSON)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from kappa_ingest.source.dataframe import Source
from kappa_ingest.source.parsing import REJECT_DDL
from kappa_ingest.source.splits import Unit
from kappa_ingest.source.task_input import parsed_units


def write(source: Source, path: str, skip: frozenset[Unit] = frozenset()) -> dict[str, int]:
    """Write the rejected rows to ``path``, parsed by the same parser the sink used (units
    in ``skip``, delivered before this run, left out); their count by reason, read back
    from what was written."""
    parser, parts, ordered = source.parser, source.plan.parts, source.ordered

    def rejects(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for parsed in parsed_units(batches, parser, parts, skip, ordered):
            if parsed.rejects.num_rows:
                yield parsed.rejects

    source.df.mapInArrow(rejects, REJECT_DDL).write.mode("overwrite").json(path)
    written = source.df.sparkSession.read.schema(REJECT_DDL).json(path)
    return {r["reason"]: r["count"] for r in written.groupBy("reason").count().orderBy("reason").collect()}
