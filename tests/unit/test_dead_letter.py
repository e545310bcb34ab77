"""A dead letter's value and context headers (pure: no Kafka)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kappa_ingest.sinks.dead_letter import records
from kappa_ingest.source.parsing import REJECT_SCHEMA, Parsed
from kappa_ingest.source.splits import Unit


def _parsed(at: list[int]) -> Parsed:
    rejects = pa.RecordBatch.from_pylist(
        [{"source_file": "file:/in/a.csv", "reason": "malformed", "line": f"text {i}"} for i in at],
        schema=REJECT_SCHEMA,
    )
    return Parsed(pa.RecordBatch.from_pylist([]), rejects, 0, np.array(at))


def test_positions_count_from_the_split_and_line_numbers_only_where_they_are_known():
    first, later = Unit("/in/a.csv", 0, 100), Unit("/in/a.csv", 100, 100)
    lines = pa.RecordBatch.from_pydict({"__kappa_line": [b"a", b"b\xff", b"c"]})
    ((value, headers),) = records(lines, _parsed([1]), first, 10, "r1", counts_lines=True)
    assert value == b"b\xff" and dict(headers)["record_in_split"] == b"12" and dict(headers)["line_number"] == b"12"
    ((_, headers),) = records(lines, _parsed([1]), later, 0, "r1", counts_lines=True)
    assert "line_number" not in dict(headers) and dict(headers)["split_start"] == b"100"
    ((value, headers),) = records(lines, _parsed([2]), first, 0, "r1", counts_lines=False)  # Spark's records
    assert value == b"text 2" and "line_number" not in dict(headers) and dict(headers)["record_in_split"] == b"3"
    shuffled = Unit("/in/a.csv", 0, 100, part=1, parts=4)
    ((_, headers),) = records(lines, _parsed([0]), shuffled, 0, "r1", counts_lines=False)
    assert set(dict(headers)) == {"run_id", "source_file", "reason", "split_start"}
