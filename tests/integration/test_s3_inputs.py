"""Inputs in an object store, against a real S3 server (S3Proxy, checking signatures): the
tasks read their splits straight from the store with ranged GETs, the same lines as from
a local file; the ledger knows each object by its ETag; every failure ends as documented.
Records are compared with what Python's csv module reads from a local copy of each object."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import S3_SECRET, consume_all, expected_rows, random_lines, rows, run, s3_put
from kappa_ingest import datagen
from kappa_ingest.delivery import ledger
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.s3 import listing
from kappa_ingest.s3.access import S3Access
from kappa_ingest.source import opening, split_reader
from kappa_ingest.source.inputs import resolve_inputs

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).parent / "kappa-ingest")


def _lines(uri: str, size: int, split: int, chunk: int, order: str | None = None) -> list[list[bytes]]:
    return [[b for arr in split_reader.split_lines(uri, s, min(split, size - s), chunk, order) for b in arr.to_pylist()]
            for s in range(0, max(size, 1), split)]  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_an_objects_splits_hold_the_lines_of_the_same_local_files_splits(s3, tmp_path, seed):
    """Random files (LF, CRLF, lone CR; with and without a last line end; UTF-16 in both
    byte orders) × split sizes × chunk sizes: each split's lines read from the store are
    those read from the local file, which tests/unit/test_split_reader.py holds to Hadoop's rule."""
    rnd = random.Random(seed)
    opening.use(opening.Store(S3Access(s3.endpoint)))
    data = random_lines(rnd, rnd.choice([5, 50, 300]))
    wide = {"<": data.decode("latin-1").encode("utf-16-le"), ">": data.decode("latin-1").encode("utf-16-be")}
    for order, body in [(None, data), *wide.items()]:
        local = tmp_path / f"in-{order or 'bytes'}.csv"
        local.write_bytes(body)
        uri = s3_put(s3, f"diff/{seed}-{local.name}", body)
        for split in {7, 64, max(1, len(body) // 3)}:  # (split 1: the local reader's test, same code)
            for chunk in (5, 1 << 20):
                ours = _lines(uri, len(body), split, chunk, order)
                assert ours == _lines(str(local), len(body), split, chunk, order), (order, split, chunk)


def test_lines_moved_by_offset_are_read_back_from_an_object_with_few_requests(s3, tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from kappa_ingest.source.columns import BLOCK_COL, BLOCK_LEN_COL, FILE_COL, LINE_COL, LINE_LEN_COL

    opening.use(opening.Store(S3Access(s3.endpoint)))
    data = random_lines(random.Random(7), 400)
    uri = s3_put(s3, "moved/a.csv", data)
    splits = pa.RecordBatch.from_pydict({FILE_COL: [uri], BLOCK_COL: [0], BLOCK_LEN_COL: [len(data)]})
    read = pa.Table.from_batches(list(split_reader.read(iter([splits]), chunk_bytes=64, at=True))).combine_chunks()
    order = np.random.default_rng(3).permutation(read.num_rows)
    moved = read.drop_columns([LINE_COL]).append_column(
        LINE_LEN_COL, pc.binary_length(read.column(LINE_COL)).cast(pa.int32())
    )
    back = split_reader.with_lines(moved.take(pa.array(order)).to_batches()[0])
    want = read.column(LINE_COL).to_pylist()
    assert back.column(LINE_COL).to_pylist() == [want[i] for i in order]


def test_every_row_once_from_objects_split_across_tasks(spark, kafka, s3, tmp_path):
    """Two objects (one gzip-compressed, read whole by one task), the plain one in three
    splits: every row once, the ledger's entries naming each object by its ETag."""
    plain = datagen.generate("wide30", 6_000, tmp_path / "a.csv", seed=21)
    packed = datagen.generate("wide30", 2_000, tmp_path / "b.csv", seed=22)
    gz = tmp_path / "b.csv.gz"
    gz.write_bytes(gzip.compress(packed.read_bytes()))
    s3_put(s3, "run/a.csv", plain)
    s3_put(s3, "run/b.csv.gz", gz)
    cfg, summary, records = run(spark, kafka, tmp_path, inputs=["s3a://landing/run/"], partitions=3,
                                s3_endpoint=s3.endpoint)  # fmt: skip
    assert summary["status"] == "succeeded" and summary["read_path"] == "lines", summary["error"]
    assert rows(records) == expected_rows(plain) + expected_rows(packed)
    files = {f["path"]: f for f in summary["plan"]["files"]}
    assert set(files) == {"s3://landing/run/a.csv", "s3://landing/run/b.csv.gz"}
    etags = {k: listing.head(k, S3Access(s3.endpoint)).etag for k in files}
    assert {k: f["version"] for k, f in files.items()} == etags and all(etags.values())
    entries = [e for e in ledger.read({"bootstrap.servers": kafka.bootstrap_servers}, cfg.ledger_topic)
               if e.run_id == cfg.run_id]  # fmt: skip
    assert {(e.unit.file, e.file_version) for e in entries} == set(etags.items())
    assert sum(e.rows_sent for e in entries) == 8_000 and len({e.unit for e in entries}) >= 4
    assert S3_SECRET not in json.dumps(summary)


def test_an_object_overwritten_after_it_was_planned_is_refused_by_its_task(spark, kafka, s3, tmp_path):
    """The task's HEAD finds another ETag than the plan's: it reads nothing of the new
    version, and the run fails naming the object (exit 3): no row of the new version is
    in the topic (read_committed)."""
    from kappa_ingest import config
    from kappa_ingest.ingest import ingest
    from kappa_ingest.source import dataframe

    path = datagen.generate("wide30", 1_000, tmp_path / "a.csv", seed=23)
    newer = datagen.generate("wide30", 1_000, tmp_path / "newer.csv", seed=24)
    uri = s3_put(s3, "changed/a.csv", path)
    cfg = config.validate({"inputs": [uri], "topic": "s3-changed", "bootstrap_servers": kafka.bootstrap_servers,
                           "metrics_dir": str(tmp_path / "m"), "s3_endpoint": s3.endpoint})  # fmt: skip
    real = dataframe.make_plan

    def plan_then_overwrite(*args, **kwargs):  # the object changes between the plan and the tasks' reads
        plan = real(*args, **kwargs)
        s3_put(s3, "changed/a.csv", newer)
        return plan

    try:
        dataframe.make_plan = plan_then_overwrite
        with pytest.raises(InputError, match=r"input s3://landing/changed/a.csv (was overwritten|changed while)"):
            ingest(cfg, spark, echo=False)
    finally:
        dataframe.make_plan = real
    summary = json.loads((tmp_path / "m" / "runs" / cfg.run_id / "summary.json").read_text())
    assert summary["status"] == "failed" and "s3://landing/changed/a.csv" in summary["error"]
    sent = rows(consume_all(kafka.bootstrap_servers, "s3-changed"))
    assert not sent & expected_rows(newer) - expected_rows(path)


def test_what_an_s3_input_names_is_refused_as_a_local_one_is(s3):
    """A missing key or bucket, a listing that finds nothing, an empty object: exit 3, named."""
    opening.use(opening.Store(S3Access(s3.endpoint)))
    s3_put(s3, "refused/empty.csv", b"")
    s3_put(s3, "refused/text/x.txt", b"id\n1\n")
    cases = {
        "s3://landing/refused/missing.csv": "no such object",
        "s3://no-such-bucket/": "no such bucket",
        "s3://landing/refused/text/": "no .csv or .csv.gz objects",
        "s3://landing/refused/*.gz": "no object matches",
        "s3://landing/refused/empty.csv": r"empty \(0 bytes\)",
    }
    for uri, why in cases.items():
        with pytest.raises(InputError, match=why):
            resolve_inputs((uri,))


def test_a_store_out_of_reach_or_refusing_the_keys_exits_4_in_a_line_and_the_secret_nowhere(s3, tmp_path):
    """Through the command line, before Spark starts: an endpoint nobody answers (named, in
    a second or two), a wrong secret ("access denied"; the secret in no output or file)."""
    import os

    from kappa_ingest.kafka.broker import free_port

    common = [CLI, "ingest", "--input", "s3://landing/run/a.csv", "--topic", "t", "--bootstrap-servers",
              "127.0.0.1:9", "--metrics-dir", str(tmp_path / "m")]  # fmt: skip
    dead = f"http://127.0.0.1:{free_port()}"
    out = subprocess.run([*common, "--s3-endpoint", dead], capture_output=True, text=True, timeout=120)
    assert out.returncode == 4, out.stderr
    [line] = [x for x in out.stderr.splitlines() if x.startswith("kappa-ingest: error")]
    assert dead in line and "did not answer" in line, line
    wrong = "wrong-secret-" + os.urandom(4).hex()
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": wrong}
    out = subprocess.run([*common, "--s3-endpoint", s3.endpoint], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 4, out.stderr
    [line] = [x for x in out.stderr.splitlines() if x.startswith("kappa-ingest: error")]
    assert "access denied" in line and s3.endpoint in line, line
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "m").rglob("*") if p.is_file())
    assert wrong not in out.stdout + out.stderr + written


def test_options_only_sparks_reader_has_are_refused_for_objects_before_spark_starts():
    from kappa_ingest import config

    base = {"inputs": ["s3://landing/a.csv"], "topic": "t"}
    for extra, why in [({"multiline": True}, "--multiline"), ({"escape": "\\"}, "--escape"),
                       ({"inputs": ["gs://b/a.csv"]}, "Google Cloud Storage")]:  # fmt: skip
        with pytest.raises(UsageError, match=why):
            config.validate({**base, **extra})
