"""Tasks that read their own splits (kappa_ingest.source.split_reader) see the lines Spark's text
scan gives, split by split, and a run reading that way sends the records a run through
Spark's scan sends."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pyspark.sql import functions as F

from helpers import run
from kappa_ingest.source import split_reader, splits
from kappa_ingest.source.columns import BLOCK_COL, BLOCK_LEN_COL, FILE_COL, LINE_COL

pytestmark = pytest.mark.integration


def _write(path, rnd: random.Random, lines: int) -> None:
    out = []
    for i in range(lines):
        text = f'{i},{"x" * rnd.choice([0, 1, 5, 80])},"q, {rnd.random():.3f}",é'
        out.append(text.encode() + rnd.choice([b"\n", b"\r\n", b"\r", b"\n\n"]))
    path.write_bytes(b"".join(out))


def test_each_split_holds_the_lines_sparks_text_scan_gives_it(spark, tmp_path):
    rnd = random.Random(3)
    folder = tmp_path / "odd name é+"
    folder.mkdir()
    paths = []
    for i, n in enumerate([1, 40, 700]):
        paths.append(folder / f"part {i}.csv")
        _write(paths[-1], rnd, n)
    split_bytes = 1000
    plan = splits.Plan(tuple(splits.local_file(str(p), False) for p in paths), split_bytes)
    for key, value in splits.spark_conf(split_bytes, split_bytes).items():
        spark.conf.set(key, value)
    scan = spark.read.text([str(p) for p in paths]).select(
        F.col("value"), F.col("_metadata.file_path"), F.col("_metadata.file_block_start"),
        F.col("_metadata.file_block_length"))  # fmt: skip
    sparks = Counter((r[1], r[2], r[3], r[0].encode()) for r in scan.collect())
    files = [split_reader.spark_file_path(u) for u in spark.read.text([str(p) for p in paths]).inputFiles()]
    assert split_reader.usable(files)
    handed = spark.createDataFrame([s for g in split_reader.assignments(plan, files, 4) for s in g],
                                   split_reader.SPLITS_DDL).toArrow().to_batches()  # fmt: skip
    ours = Counter()
    for b in split_reader.read(iter(handed), chunk_bytes=64):
        cols = [b.column(c).to_pylist() for c in (FILE_COL, BLOCK_COL, BLOCK_LEN_COL, LINE_COL)]
        ours.update(zip(*cols, strict=True))
    assert len(sparks) > 700 and ours == sparks
    assert sum(len(g) for g in split_reader.assignments(plan, files, 4)) == len(plan.units()) > 3


def test_a_run_that_reads_its_own_splits_sends_what_one_through_sparks_scan_sends(spark, kafka, tmp_path, monkeypatch):
    from kappa_ingest import datagen

    path = datagen.generate("wide30", 3000, tmp_path / "in put.csv", seed=9)
    options = dict(inputs=[str(path)], partitions=2, sink="confluent")
    _, direct, by_direct = run(spark, kafka, tmp_path, topic="direct", **options)
    monkeypatch.setattr(split_reader, "usable", lambda uris: False)
    _, scanned, by_scan = run(spark, kafka, tmp_path, topic="scanned", **options)
    assert direct["rows_sent"] == scanned["rows_sent"] == 3000
    assert all(c["ok"] for c in direct["checks"]) and all(c["ok"] for c in scanned["checks"])
    assert any(c["name"].startswith("lines the tasks read") for c in direct["checks"])
    assert any(c["name"].startswith("Spark's input records") for c in scanned["checks"])

    def records(rs):
        return Counter((r.key, r.value["source_file"], str(r.value["data"]), r.headers["source_file"]) for r in rs)

    assert records(by_direct) == records(by_scan)
    assert {t["rows"] for t in direct["tasks"]} == {t["rows"] for t in scanned["tasks"]}
