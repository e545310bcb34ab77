"""Tasks that read their own splits (kappa_ingest.source.split_reader) see the lines Spark's text
scan gives, split by split, and a run reading that way sends the records a run through
Spark's scan sends."""

from __future__ import annotations

import json
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


def test_sparks_names_and_tasks_for_local_files_are_known_without_its_scan(spark, tmp_path):
    from kappa_ingest.source import dataframe

    rnd = random.Random(5)
    folder = tmp_path / "in-put_1.x"
    folder.mkdir()
    paths = []
    for i in range(40):
        paths.append(str(folder / f"f{i:02d}{'+a,b=c@d~e' if i % 7 == 0 else ''}.csv"))
        with open(paths[-1], "wb") as f:
            f.write(b"a,b\n" + b"1,2\n" * rnd.choice([1, 10, 300, 3000, 9000]))
    names = dataframe.spark_names(paths)
    scan = spark.read.text(paths)
    assert names is not None and sorted(names) == sorted(split_reader.spark_file_path(u) for u in scan.inputFiles())
    plan = splits.Plan(tuple(splits.local_file(p, False) for p in paths), 20_000)
    for open_cost in (0, 4096, 50_000, 20_000):
        for key, value in splits.spark_conf(plan.split_bytes, open_cost, local=True).items():
            spark.conf.set(key, value)
        for some in (paths, paths[:1], paths[5:9]):
            spark_tasks = spark.read.text(some)._jdf.rdd().getNumPartitions()
            assert dataframe.scan_tasks(plan, some, open_cost) == spark_tasks, (open_cost, len(some))
    assert dataframe.spark_names(["/a b.csv"]) is None and dataframe.spark_names(["/é.csv"]) is None
    assert dataframe.spark_names(["//a.csv"]) is None and dataframe.spark_names(["/a%41.csv"]) is None


def test_files_spark_would_skip_are_sent_or_refused_never_planned_and_left_unread(spark, kafka, tmp_path):
    import gzip

    from kappa_ingest.errors import InputError

    folder = tmp_path / "in"
    folder.mkdir()
    for name, rows in (("_x.csv", 3), (".y.csv", 4), ("z.csv", 5), ("header-only.csv", 0)):
        (folder / name).write_text("a,b\n" + "".join(f"{name},{i}\n" for i in range(rows)))
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(folder)], topic="hidden-names")
    assert summary["status"] == "succeeded" and summary["rows_sent"] == 12, summary["error"]
    assert summary["ledger"]["units_without_rows"] == 0  # every file's split seen by its task, the header-only one too
    assert Counter(r.value["data"]["a"] for r in records) == {"_x.csv": 3, ".y.csv": 4, "z.csv": 5}
    with gzip.open(folder / "_w.csv.gz", "wt") as f:
        f.write("a,b\n1,2\n")
    # A compressed file among them: Spark reads them all, and would leave out three.
    with pytest.raises(InputError, match=r"in/\.y\.csv: Spark's file reader skips names beginning with '_' or '\.'"):
        run(spark, kafka, tmp_path / "gz", inputs=[str(folder)], topic="hidden-names-gz")


def test_a_reader_that_leaves_a_planned_file_out_fails_the_run_and_the_ledger_does_not_count_it_sent(
    spark, kafka, tmp_path, monkeypatch
):
    from kappa_ingest import config
    from kappa_ingest.delivery import incremental, ledger
    from kappa_ingest.source import dataframe

    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("_x.csv", "z.csv"):
        (folder / name).write_text(f"a,b\n{name},1\n")
    # Spark's own scan, and its rule let through: it plans _x.csv and never reads it.
    monkeypatch.setattr(split_reader, "usable", lambda uris: False)
    monkeypatch.setattr(dataframe, "skipped_by_spark", lambda paths: None)
    with pytest.raises(Exception, match="do not reconcile"):
        run(spark, kafka, tmp_path, inputs=[str(folder)], topic="left-out", incremental=True)
    summary = json.loads(next((tmp_path / "metrics" / "runs").glob("*/summary.json")).read_text())
    check = next(c for c in summary["checks"] if c["name"] == "every file the run planned was read by a task")
    assert not check["ok"] and check["actual"] == [str(folder / "_x.csv")]
    cfg = config.validate({"inputs": [str(folder)], "topic": "left-out", "bootstrap_servers": kafka.bootstrap_servers})
    entries = ledger.read({"bootstrap.servers": kafka.bootstrap_servers}, cfg.ledger_topic)
    files = [splits.local_file(str(folder / n), False) for n in ("_x.csv", "z.csv")]
    backlog = incremental.classify(files, entries, "left-out")
    assert [f.path for f in backlog.new] == [str(folder / "_x.csv")]  # the next --incremental run sends it
