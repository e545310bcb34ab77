"""Inputs in an object store, against a real S3 server (S3Proxy, checking signatures): the
tasks read their splits straight from the store with ranged GETs, the same lines as from
a local file; the ledger knows each object by its ETag; every failure ends as documented.
Records are compared with what Python's csv module reads from a local copy of each object."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers import S3_SECRET, consume_all, expected_rows, random_lines, rows, run, s3_put
from kappa_ingest import datagen
from kappa_ingest.delivery import ledger
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.s3 import listing, objects, signed_list
from kappa_ingest.s3.access import S3Access, StoreUnavailable
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
    etags = {k: objects.head(k, S3Access(s3.endpoint)).etag for k in files}
    assert {k: f["version"] for k, f in files.items()} == etags and all(etags.values())
    entries = [e for e in ledger.read({"bootstrap.servers": kafka.bootstrap_servers}, cfg.ledger_topic)
               if e.run_id == cfg.run_id]  # fmt: skip
    assert {(e.unit.file, e.file_version) for e in entries} == set(etags.items())
    assert sum(e.rows_sent for e in entries) == 8_000 and len({e.unit for e in entries}) >= 4
    # The secret the executors' chain found is nowhere the run wrote or Spark shows.
    import urllib.request

    places = {p.name: p.read_bytes() for p in (tmp_path / "metrics").rglob("*") if p.is_file()}
    sc = spark.sparkContext
    for page in ("environment", "sql?details=true&planDescription=true", "stages?details=true"):
        with urllib.request.urlopen(f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{page}", timeout=10) as r:
            places[f"Spark UI {page}"] = r.read()
    log_dir = Path(spark.conf.get("spark.eventLog.dir").removeprefix("file:"))
    places["Spark event log"] = b"".join(p.read_bytes() for p in log_dir.rglob("*") if p.is_file())
    assert "summary.json" in places and all(places.values())
    assert [where for where, data in places.items() if S3_SECRET.encode() in data] == []


@pytest.mark.parametrize("change", ["overwritten", "deleted"])
def test_an_object_changed_after_it_was_planned_is_refused_by_its_task(spark, kafka, s3, tmp_path, change):
    """Between the plan and the tasks' reads the object is overwritten (the task's HEAD finds
    another ETag than the plan's) or deleted: the task reads nothing of it, and the run fails
    naming the object (exit 3): no row of a new version is in the topic (read_committed),
    and none of the planned one was sent."""
    from helpers import s3_filesystem
    from kappa_ingest import config
    from kappa_ingest.ingest import ingest
    from kappa_ingest.source import dataframe

    path = datagen.generate("wide30", 1_000, tmp_path / "a.csv", seed=23)
    newer = datagen.generate("wide30", 1_000, tmp_path / "newer.csv", seed=24)
    key, topic = f"{change}/a.csv", f"s3-{change}"
    uri = s3_put(s3, key, path)
    cfg = config.validate({"inputs": [uri], "topic": topic, "bootstrap_servers": kafka.bootstrap_servers,
                           "metrics_dir": str(tmp_path / "m"), "s3_endpoint": s3.endpoint})  # fmt: skip
    real = dataframe.make_plan

    def plan_then_change(*args, **kwargs):  # the object changes between the plan and the tasks' reads
        plan = real(*args, **kwargs)
        if change == "overwritten":
            s3_put(s3, key, newer)
        else:
            s3_filesystem(s3).delete_file(f"landing/{key}")
        return plan

    try:
        dataframe.make_plan = plan_then_change
        with pytest.raises(InputError, match=rf"input {uri} (was {change}|changed while)"):
            ingest(cfg, spark, echo=False)
    finally:
        dataframe.make_plan = real
    summary = json.loads((tmp_path / "m" / "runs" / cfg.run_id / "summary.json").read_text())
    assert summary["status"] == "failed" and uri in summary["error"]
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == Counter()


@pytest.fixture(params=["signed", "pyarrow"])
def listed_by(request, monkeypatch):
    """Listings as the driver makes them with plain keys (its own signed ListObjectsV2,
    ETags from the pages) and as with keys only the AWS SDK finds (pyarrow, a HEAD each)."""
    if request.param == "pyarrow":
        monkeypatch.setattr(signed_list, "static_keys", dict)
    return request.param


def test_a_listing_names_each_object_with_its_etag_by_the_same_rules_either_way(s3, listed_by):
    """A prefix takes the .csv/.csv.gz objects directly under it; a glob matches segment by
    segment (its prefix as long as the glob allows); keys with a space, ``+``, ``%``, ``=`` and ``&``
    survive the page's URL encoding; more objects than a page holds are all found.
    Each object's size, time and ETag are those its own HEAD gives."""
    access = S3Access(s3.endpoint)
    odd = ["list/a b+c%d=e&f.csv", "list/z.csv.gz"]
    for key in [*odd, "list/sub/deep.csv", "list/notes.txt", "list/sub/x/deeper.csv"]:
        s3_put(s3, key, b"id\n1\n")
    everything = [f"s3://landing/{k}" for k in sorted(odd)]
    assert [o.uri for o in listing.list_objects("s3://landing/list/", access)] == everything
    assert [o.uri for o in listing.list_objects("s3a://landing/list/*/*.csv", access)] == [
        "s3://landing/list/sub/deep.csv"
    ]
    assert [o.uri for o in listing.list_objects("s3://landing/list/su*/*/*.csv", access)] == [
        "s3://landing/list/sub/x/deeper.csv"
    ]
    assert listing.list_objects("s3://landing/list/", access) == [objects.head(u, access) for u in everything]
    if listed_by == "signed":  # pages: one more object than a page of 1,000 holds
        many = [s3_put(s3, f"pages/{i:04d}.csv", b"id\n1\n") for i in range(1001)]
        assert [o.uri for o in listing.list_objects("s3://landing/pages/", access)] == many


def test_what_an_s3_input_names_is_refused_as_a_local_one_is(s3, listed_by):
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
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "kappa-local", "AWS_SECRET_ACCESS_KEY": wrong}  # (before the file)
    out = subprocess.run([*common, "--s3-endpoint", s3.endpoint], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 4, out.stderr
    [line] = [x for x in out.stderr.splitlines() if x.startswith("kappa-ingest: error")]
    assert "access denied" in line and s3.endpoint in line, line
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "m").rglob("*") if p.is_file())
    assert wrong not in out.stdout + out.stderr + written


def test_a_listing_the_store_refuses_or_nobody_answers_is_exit_4_naming_the_endpoint(s3, listed_by, monkeypatch):
    from kappa_ingest.kafka.broker import free_port

    dead = S3Access(f"http://127.0.0.1:{free_port()}").quick()
    with pytest.raises(StoreUnavailable, match=rf"store at {dead.endpoint} did not answer"):
        listing.list_objects("s3://landing/list/", dead)
    wrong = "wrong-secret-" + os.urandom(4).hex()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "kappa-local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    with pytest.raises(StoreUnavailable, match="access denied") as refused:
        # (settings no other test uses: pyarrow's filesystem, cached per settings, reads keys when built)
        listing.list_objects("s3://landing/list/", S3Access(s3.endpoint, connect_timeout_s=2.5))
    assert refused.value.exit_code == 4 and wrong not in str(refused.value)


def test_options_only_sparks_reader_has_are_refused_for_objects_before_spark_starts():
    from kappa_ingest import config

    base = {"inputs": ["s3://landing/a.csv"], "topic": "t"}
    for extra, why in [({"multiline": True}, "--multiline"), ({"escape": "\\"}, "--escape"),
                       ({"inputs": ["gs://b/a.csv"]}, "Google Cloud Storage")]:  # fmt: skip
        with pytest.raises(UsageError, match=why):
            config.validate({**base, **extra})


def _table(path: Path, n: int, seed: int) -> Path:
    """A file of keyed, event-timed rows (some null, some not a time), a few ragged lines."""
    import csv

    rnd = random.Random(seed)
    events = ["2020-05-06T07:08:09.123Z", "2020-05-06 07:08:09", "2020-05-06T07:09:00Z", "2020-13-01T00:00:00", "NA"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "ev", "k", "v"])
        for i in range(n):
            if i % 499 == 7:
                f.write(f"{i},ragged\n")
            else:
                w.writerow([i, rnd.choice(events), rnd.choice(["a", "b", "é"]), rnd.choice(['x, "y"', "", "NA"])])
    return path


def _kept(records) -> Counter:
    """Each record as its key, data, event time and timestamp (not its run or ingest time)."""
    return Counter((r.key, json.dumps(r.value["data"], sort_keys=True), r.value.get("event_ts"), r.timestamp_ms)
                   for r in records)  # fmt: skip


@pytest.mark.parametrize(
    ("order", "packed"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["unit by unit", "ordered replay", "gzip: more producers than splits", "gzip: ordered replay"],
)
def test_every_mode_reads_an_object_as_it_reads_the_same_local_file(spark, kafka, s3, tmp_path, order, packed):
    """The same options on a local file and on its copy in the store give the same records,
    quarantine and dead letters (whose source_file is the s3:// URI); an ordered replay's
    lines are read back from the object by offset and reach each key's partition in
    event-time order. A gzipped object's lines (offsets in its text, not in the object)
    move through the shuffle with their text, as Spark's scan of the local file moves them."""
    local = _table(tmp_path / "t.csv", 3_000, seed=31)
    if packed:
        (tmp_path / "t.csv.gz").write_bytes(gzip.compress(local.read_bytes()))
        local = tmp_path / "t.csv.gz"
    uri = s3_put(s3, f"modes/{order}/{local.name}", local)
    options = dict(key_column="k", event_time_column="ev", null_values=("NA",), partitions=3,
                   schema="id INT, v STRING", order_by_event_time=order)  # fmt: skip
    results = {}
    for where, inputs in (("local", [str(local)]), ("s3", [uri])):
        dlq = f"dead-{where}-{order}-{packed}"
        out = tmp_path / where
        out.mkdir()
        results[where] = run(spark, kafka, out, inputs=inputs, dead_letter_topic=dlq, s3_endpoint=s3.endpoint,
                             topic=f"modes-{where}-{order}-{packed}", **options)  # fmt: skip
        results[where] += (consume_all(kafka.bootstrap_servers, dlq, json_values=False),)
    (_, local_sum, local_recs, local_dead), (_, s3_sum, s3_recs, s3_dead) = results["local"], results["s3"]
    assert s3_sum["status"] == "succeeded" and s3_sum["read_path"] == "lines", s3_sum["error"]
    assert _kept(s3_recs) == _kept(local_recs) and len(s3_recs) == s3_sum["rows_sent"] > 0
    quarantined = s3_sum["rows_quarantined"]
    assert s3_sum["quarantine"]["reasons"] == local_sum["quarantine"]["reasons"] and quarantined >= 6  # 6 ragged lines
    assert Counter(r.raw_value for r in s3_dead) == Counter(r.raw_value for r in local_dead)
    assert len(s3_dead) == quarantined and s3_sum["rows_sent"] + quarantined == 3_000
    assert {r.headers["source_file"] for r in s3_dead} == {uri.encode()}
    if order:
        seen: dict = {}
        for r in s3_recs:
            seen.setdefault((r.partition, r.key), []).append(r.timestamp_ms)
        assert all(times == sorted(times) for times in seen.values())


def test_a_resumed_run_refuses_an_object_overwritten_since_its_plan(spark, s3, tmp_path):
    """What --resume checks of the plan it continues: an object's ETag, not only its size
    and time (an overwrite within the second, same size, is another object)."""
    from kappa_ingest import config
    from kappa_ingest.source import dataframe
    from kappa_ingest.source.splits import Plan

    uri = s3_put(s3, "resumed/a.csv", b"id,v\n1,a\n2,b\n")
    opening.for_run(s3.endpoint)
    cfg = config.validate({"inputs": [uri], "topic": "t", "s3_endpoint": s3.endpoint})
    plan = Plan.from_json(dataframe.make_plan(spark, cfg, [uri]).to_json())  # as summary.json keeps it
    assert plan.changed() == []
    s3_put(s3, "resumed/a.csv", b"id,v\n1,a\n2,c\n")  # same size
    [(planned, now)] = plan.changed()
    assert now is not None and now.size == planned.size and now.version != planned.version
    assert "overwritten, ETag" in dataframe.splits.changed_what(planned, now)


def test_the_local_store_command_starts_reports_puts_and_stops_a_server(tmp_path):
    """The docs' lines for a newcomer: start, put a file (its bucket made), status, stop."""
    import os

    from pyarrow import fs

    run_cli = lambda *a, env=None: subprocess.run([CLI, "s3", *a, "--dir", str(tmp_path / "s3")],  # noqa: E731
                                                  capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    started = run_cli("start")
    try:
        assert started.returncode == 0, started.stderr
        endpoint = started.stdout.split("local S3 running at ", 1)[1].split()[0]
        assert (tmp_path / "s3" / "secret-access-key").stat().st_mode & 0o777 == 0o600
        status = run_cli("status")
        assert status.returncode == 0 and endpoint in status.stdout
        secret = (tmp_path / "s3" / "secret-access-key").read_text().strip()
        data = random_lines(random.Random(5), 50)
        (tmp_path / "in.csv").write_bytes(data)
        env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "kappa-local",
               "AWS_SECRET_ACCESS_KEY": secret}  # fmt: skip
        put = run_cli("put", str(tmp_path / "in.csv"), "s3://demo/in.csv", env=env)
        assert put.returncode == 0 and "as s3://demo/in.csv" in put.stdout, put.stderr
        store = fs.S3FileSystem(access_key="kappa-local", secret_key=secret, scheme="http", region="us-east-1",
                                endpoint_override=endpoint.removeprefix("http://"))  # fmt: skip
        with store.open_input_stream("demo/in.csv", compression=None) as f:
            assert f.read() == data
        bad = run_cli("put", str(tmp_path / "in.csv"), "s3://demo/", env=env)
        assert bad.returncode == 2 and "s3://BUCKET/KEY" in bad.stderr
    finally:
        stopped = run_cli("stop")
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped"
    assert run_cli("status").returncode == 1


def test_a_replay_of_objects_resends_those_unchanged_and_names_the_one_overwritten(spark, kafka, s3, tmp_path):
    """reprocess from objects: an object overwritten since it was delivered (same size) is
    left out, named with its ETags; the other is replayed, every row."""
    from kappa_ingest import config, reprocess
    from kappa_ingest.ingest import ingest

    kept = datagen.generate("wide30", 500, tmp_path / "kept.csv", seed=41)
    gone = datagen.generate("wide30", 500, tmp_path / "over.csv", seed=42)
    uris = [s3_put(s3, "history/kept.csv", kept), s3_put(s3, "history/over.csv", gone)]
    base = {"bootstrap_servers": kafka.bootstrap_servers, "metrics_dir": str(tmp_path / "m"), "quiet": True,
            "s3_endpoint": s3.endpoint}  # fmt: skip
    ingest(config.validate({**base, "inputs": uris, "topic": "s3-history", "run_id": "s3h"}), spark, echo=False)
    body = gone.read_bytes()
    s3_put(s3, "history/over.csv", body[:-2] + (b"x\n" if body[-2:] != b"x\n" else b"y\n"))  # same size
    values, chosen = reprocess.prepare({**base, "from_topic": "s3-history", "runs": "s3h", "topic": "s3-history.v2",
                                        "run_id": "s3h-replay"}, sized_on_command_line=False)  # fmt: skip
    assert chosen.files == (uris[0],)
    [left] = chosen.not_resent
    assert left["file"] == uris[1] and "changed since delivered (ETag" in left["reason"]
    ingest(config.validate(values), spark, echo=False, replay=chosen)
    assert rows(consume_all(kafka.bootstrap_servers, "s3-history.v2")) == expected_rows(kept)


def test_an_incremental_run_over_a_prefix_sends_each_new_object_once_and_refuses_an_overwritten_one(
    spark, kafka, s3, tmp_path
):
    from kappa_ingest import config
    from kappa_ingest.errors import InputError
    from kappa_ingest.ingest import ingest

    def scheduled(**extra) -> dict:
        cfg = config.validate({"inputs": ["s3://landing/inc/"], "topic": "s3-inc", "incremental": True, "quiet": True,
                               "bootstrap_servers": kafka.bootstrap_servers, "metrics_dir": str(tmp_path / "m"),
                               "s3_endpoint": s3.endpoint, **extra})  # fmt: skip
        ingest(cfg, spark, echo=False)
        return json.loads((tmp_path / "m" / "runs" / cfg.run_id / "summary.json").read_text())

    days = [datagen.generate("debs2012", 300, tmp_path / f"d{i}.csv", seed=50 + i) for i in range(3)]
    s3_put(s3, "inc/d0.csv", days[0])
    s3_put(s3, "inc/d1.csv", days[1])
    first = scheduled()
    s3_put(s3, "inc/d2.csv", days[2])
    second = scheduled()
    assert first["rows_sent"] == 600 and second["rows_sent"] == 300
    assert rows(consume_all(kafka.bootstrap_servers, "s3-inc")) == sum((expected_rows(d) for d in days), Counter())
    body = days[0].read_bytes()
    s3_put(s3, "inc/d0.csv", body[:-2] + (b"x\n" if body[-2:] != b"x\n" else b"y\n"))  # same size, another object
    with pytest.raises(InputError, match=r"s3://landing/inc/d0.csv \(overwritten, ETag"):
        scheduled()


def test_a_metrics_dir_in_the_store_holds_every_runs_report_and_report_and_the_notebook_read_it(
    spark, kafka, s3, tmp_path, monkeypatch
):
    """``--metrics-dir s3://...``: two runs of objects (the first with a quarantine and a
    quality gate, the second's object in Latin-1) leave their summary.json, quarantine, Data
    Docs and Delta rows in the store and nothing on local disk; ``report --last`` and
    ``--html`` and the notebook read them from there. The quarantine is checked against the
    csv module's reading of the input, the records and the Delta rows against the
    consumer's, and the suite's secret is in no object the runs wrote."""
    import csv
    import os

    import nbformat
    import yaml
    from nbclient import NotebookClient
    from pyarrow import fs

    from helpers import s3_filesystem
    from kappa_ingest import config
    from kappa_ingest.ingest import ingest
    from kappa_ingest.report import store as metrics_store
    from kappa_ingest.s3.directory import Directory

    bucket = s3_filesystem(s3)
    bucket.create_dir("reports")
    where = "s3://reports/kappa"
    local = _table(tmp_path / "t.csv", 2_000, seed=41)
    with open(local, newline="", encoding="utf-8") as f:
        ragged = sorted(",".join(r) for r in list(csv.reader(f))[1:] if len(r) != 4)
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        yaml.safe_dump([{"expectation": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}}])
    )
    first = tmp_path / "first"
    first.mkdir()
    uri = s3_put(s3, "reports/t.csv", local)
    cfg = config.validate({"inputs": [uri], "topic": "store-reports", "bootstrap_servers": kafka.bootstrap_servers,
                           "metrics_dir": where, "s3_endpoint": s3.endpoint, "expectations": str(suite),
                           "run_id": "in-the-store"})  # fmt: skip
    ingest(cfg, spark, echo=False)
    second = tmp_path / "second.csv"  # Latin-1: a byte of its own per accented letter
    second.write_bytes("id,name\n1,Zoë\n2,Ångström\n3,plain\n".encode("latin-1"))
    ingest(config.validate({"inputs": [s3_put(s3, "reports/second.csv", second)], "topic": "store-reports-2",
                            "metrics_dir": where, "bootstrap_servers": kafka.bootstrap_servers, "encoding": "latin-1",
                            "s3_endpoint": s3.endpoint, "run_id": "second"}), spark, echo=False)  # fmt: skip
    latin = consume_all(kafka.bootstrap_servers, "store-reports-2")
    assert sorted(r.value["data"]["name"] for r in latin) == sorted(["plain", "Zoë", "Ångström"])
    assert not (Path.cwd() / "s3:").exists() and not any(tmp_path.rglob("summary.json"))

    def text(key: str) -> str:
        with bucket.open_input_stream(f"reports/kappa/{key}") as f:
            return f.read().decode()

    summary = json.loads(text("runs/in-the-store/summary.json"))
    assert summary["status"] == "succeeded", summary["error"]
    sent = consume_all(kafka.bootstrap_servers, "store-reports")
    assert summary["rows_sent"] == len(sent) == 2_000 - len(ragged) and len(ragged) >= 4
    assert rows(sent) == expected_rows(local)  # record by record, as the csv module reads the file
    parts = bucket.get_file_info(fs.FileSelector("reports/kappa/runs/in-the-store/quarantine"))
    quarantined = [json.loads(line) for p in parts for line in text(p.path.removeprefix("reports/kappa/")).splitlines()]
    assert sorted(q["line"] for q in quarantined) == ragged and {q["source_file"] for q in quarantined} == {uri}
    assert summary["quarantine"]["path"] == f"{where}/runs/in-the-store/quarantine"
    assert summary["quarantine"]["reasons"] == dict(Counter(q["reason"] for q in quarantined))
    docs = summary["quality"]["data_docs"]
    assert docs.startswith(f"{where}/runs/in-the-store/data_docs/") and "<html" in text(docs.removeprefix(f"{where}/"))
    store = Directory.at(where, s3.endpoint)
    runs = {r["run_id"]: r for r in metrics_store.last_runs(store, 10)}
    assert set(runs) == {"in-the-store", "second"} and runs["in-the-store"]["rows_sent"] == len(sent)
    assert len(metrics_store.run(store, "in-the-store")["tasks"]) == len(summary["tasks"]) > 0

    env = {**os.environ, "AWS_ENDPOINT_URL": s3.endpoint}
    html = tmp_path / "page.html"
    last = subprocess.run([CLI, "report", "--metrics-dir", where, "--last", "5"], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert last.returncode == 0 and "in-the-store" in last.stdout and "second" in last.stdout, last.stderr
    page = subprocess.run([CLI, "report", "--metrics-dir", where, "--s3-endpoint", s3.endpoint, "--run-id", "second",
                           "--html", str(html)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert page.returncode == 0 and "second" in html.read_text(), page.stderr
    missing = subprocess.run([CLI, "report", "--metrics-dir", "s3://no-such-bucket/m", "--s3-endpoint", s3.endpoint],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert missing.returncode == 3 and "no such bucket" in missing.stderr, missing.stderr

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / "ingest_rates.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("print(sorted(r['run_id'] for r in runs))"))
    for name, value in (("KAPPA_METRICS_DIR", where), ("KAPPA_BENCH_DIR", str(tmp_path / "no-bench")),
                        ("AWS_ENDPOINT_URL", s3.endpoint)):  # fmt: skip
        monkeypatch.setenv(name, value)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert nb.cells[-1].outputs[0]["text"].strip() == "['in-the-store', 'second']"

    written = [i.path for i in bucket.get_file_info(fs.FileSelector("reports", recursive=True)) if i.is_file]
    assert len(written) > 20
    with_secret = [p for p in written if S3_SECRET.encode() in bucket.open_input_stream(p).read()]
    assert with_secret == [] and S3_SECRET not in last.stdout + last.stderr + page.stdout + page.stderr
