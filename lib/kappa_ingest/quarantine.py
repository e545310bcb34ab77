"""Rows that cannot be sent faithfully, written with their file and reason under
``<metrics-dir>/runs/<run_id>/quarantine/`` (JSON lines: ``source_file``, ``reason``,
``line`` — a malformed row's raw text — and ``fields``, the row as parsed)."""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql import types as T

from kappa_ingest.config import IngestConfig
from kappa_ingest.csv_source import CORRUPT_COL, REASON_MALFORMED, Source, malformed_detail
from kappa_ingest.records import FILE_COL, REJECT_COL


def write(source: Source, cfg: IngestConfig, path: str) -> dict[str, int]:
    """Write the rejected rows to ``path``; their count by reason, as written."""
    n_fields = len(source.spec.columns)
    delimiter, quote = cfg.delimiter, cfg.quote

    @F.udf(T.StringType())
    def detail(line: str | None) -> str:
        return malformed_detail(line, n_fields, delimiter, quote)

    reason = F.col(REJECT_COL)
    rejected = source.df.filter(reason.isNotNull()).select(
        F.col(FILE_COL).alias("source_file"),
        F.when(reason == REASON_MALFORMED, detail(F.col(CORRUPT_COL))).otherwise(reason).alias("reason"),
        F.col(CORRUPT_COL).alias("line"),
        F.to_json(F.struct(*[F.col(c) for c in source.spec.columns]), {"ignoreNullFields": "false"}).alias("fields"),
    )
    rejected.write.mode("overwrite").json(path)
    written = rejected.sparkSession.read.schema("reason string").json(path)
    return {r["reason"]: r["count"] for r in written.groupBy("reason").count().orderBy("reason").collect()}
