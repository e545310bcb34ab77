"""A unit of delivery is the same rows in every run: after a shuffle (more producers than a
file splits into) which part of a split a row lands in depends on the row and its own file
alone, not on the other files a run reads beside it or the order of their columns. A
resumed or incremental run that reads a half-delivered file beside others must cut it into
the units the first run's ledger entries name, or rows go twice or never."""

from __future__ import annotations

import gzip

import pytest
from pyspark.sql import functions as F

from kappa_ingest import config
from kappa_ingest.source import dataframe as csv_source
from kappa_ingest.source.columns import FILE_COL
from kappa_ingest.source.splits import Plan, local_file

pytestmark = pytest.mark.integration


def _gz(path, header: list[str], rows: list[list[str]]):
    with gzip.open(path, "wt", newline="") as f:
        f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join(r) + "\n")
    return path


def _parts(spark, tmp_path, paths, plan_files) -> set[tuple]:
    """(task, a, b, c) of every row of ``half.csv.gz`` as a two-part shuffled read of ``paths`` puts it."""
    cfg = config.validate(
        {"inputs": [str(p) for p in paths], "topic": "t", "partitions": 2, "metrics_dir": str(tmp_path)}
    )
    plan = Plan(tuple(local_file(str(p), False) for p in plan_files), 1 << 30, parts=2)
    source = csv_source.read(spark, cfg, plan, [str(p) for p in paths])
    assert source.shuffled and source.plan.parts == 2
    mine = source.df.where(F.col(FILE_COL).endswith("half.csv.gz"))
    return {tuple(r) for r in mine.select(F.spark_partition_id(), "a", "b", "c").collect()}


def test_a_rows_part_of_its_split_depends_on_its_own_file_alone(spark, tmp_path):
    rows = [[f"a{i}", f"b{i % 7}", f"c{i % 3}"] for i in range(400)]
    half = _gz(tmp_path / "half.csv.gz", ["a", "b", "c"], rows)
    # Another file read beside it, the same columns in another order, its name sorting first:
    # the union of both headers puts the columns in its order.
    other = _gz(tmp_path / "a-other.csv.gz", ["c", "a", "b"], [[f"z{i}", f"y{i}", f"x{i}"] for i in range(50)])
    alone = _parts(spark, tmp_path, [half], [half])
    beside = _parts(spark, tmp_path, [other, half], [other, half])
    assert len(alone) == 400 and {p for p, *_ in alone} == {0, 1}  # both parts hold rows
    assert beside == alone
