"""Hostile inputs, one case each, run in-process on the shared Spark session and broker:
preflight, then the ingest, as the command line runs them.

Every case asserts how the run ends (its exit code, or the quarantine's reason), what the
topic holds (every good row, compared with Python's csv module; nothing for a refused run:
the topic absent or without a committed record), for a refusal that its report says so
and, where the inputs alone are at fault, that it came before Spark read anything; and
that memory stayed bounded: the resident memory of this process and all its children (the
Spark JVM, its Python workers, the broker), sampled every 0.1 s, rose less than a bound
above what it was before the case. A run that hangs is ended by its subprocess's timeout
or the suite's per-test timeout; how fast a run is, ``make bench`` says.
docs/records.md, "Hostile inputs", is the table of these cases.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from helpers import consume_all, csv_rows, expected_rows, rows
from kappa_ingest import config, datagen
from kappa_ingest.bench.monitor import run_measured
from kappa_ingest.errors import KappaError
from kappa_ingest.ingest import ingest
from kappa_ingest.preflight import preflight
from kappa_ingest.report import recording
from kappa_ingest.report import store as metrics_store
from kappa_ingest.report.phases import RunClock
from kappa_ingest.source.splits import canonical_file

pytestmark = pytest.mark.integration

HANG_S = 600.0  # a job of its own that runs longer than this hangs: its subprocess is ended
GIB = 1 << 30
RSS_RISE = int(1.5 * GIB)  # the process tree's peak above its level before the case
REASON_QUOTES = "unbalanced quotes (a quoted field with a newline needs --multiline)"


class PeakRss:
    """The peak resident memory of this process and all its children, sampled every 0.1 s
    on a thread while the block runs; ``rise`` is the peak above the level at the start."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.base = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    def total(self) -> int:
        total = 0
        for p in [self.me, *self.me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:  # a worker that ended between listing and reading
                pass
        return total

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self.total())

    def __enter__(self) -> PeakRss:
        self.base = self.peak = self.total()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.total())

    @property
    def rise(self) -> int:
        return self.peak - self.base


@dataclass
class Outcome:
    cfg: config.IngestConfig
    exit_code: int
    error: str | None
    summary: dict | None
    records: list | None  # None: the topic does not exist
    wall_s: float
    rss_rise: int
    spark_jobs: int = 0  # jobs Spark ran for the case (none: it read nothing)

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.metrics_dir) / "runs" / self.cfg.run_id


def topic_exists(bootstrap: str, topic: str) -> bool:
    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def attempt(spark, kafka, tmp_path: Path, inputs: list, *, rss_rise: int = RSS_RISE, during=None, **options) -> Outcome:
    """Preflight and ingest ``inputs`` into a fresh topic as the command line would, within
    the time and memory bounds; the exit code (0, or the KappaError's) and what the topic holds."""
    values = {"inputs": [str(i) for i in inputs], "topic": f"hostile-{tmp_path.name}",
              "bootstrap_servers": kafka.bootstrap_servers, "metrics_dir": str(tmp_path / "metrics"),
              **options}  # fmt: skip
    cfg = config.validate(values)
    code, error = 0, None
    jobs_before = spark_jobs(spark)
    with PeakRss() as mem:
        if during is not None:
            during.start()
        started = time.monotonic()
        try:
            try:
                preflight(cfg)
            except KappaError as e:  # as the command line does: a report saying why, then the exit
                recording.failed_report(cfg, RunClock.from_process_start(), e)
                raise
            ingest(cfg, spark, echo=False)
        except KappaError as e:
            code, error = e.exit_code, str(e)
        wall = time.monotonic() - started
        if during is not None:
            during.join(60)
    path = tmp_path / "metrics" / "runs" / cfg.run_id / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else None
    records = (
        consume_all(kafka.bootstrap_servers, cfg.topic) if topic_exists(kafka.bootstrap_servers, cfg.topic) else None
    )
    print(f"{tmp_path.name}: exit {code} in {wall:.1f} s, memory +{mem.rise / GIB:.2f} GiB; {error or ''}")
    assert mem.rise < rss_rise, f"memory rose {mem.rise / GIB:.2f} GiB (from {mem.base / GIB:.2f} GiB)"
    return Outcome(cfg, code, error, summary, records, wall, mem.rise, spark_jobs(spark) - jobs_before)


def spark_jobs(spark) -> int:
    """How many jobs the shared session has run (its newest job's id + 1), by Spark's REST API;
    the Python workers' warm-up aside: it starts with the run, and reads no input."""
    from kappa_ingest.spark.warmup import JOB_GROUP

    sc = spark.sparkContext
    with urllib.request.urlopen(f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/jobs", timeout=10) as r:
        return max((j["jobId"] + 1 for j in json.load(r) if j.get("jobGroup") != JOB_GROUP), default=0)


def attempt_submitted(kafka, tmp_path: Path, inputs: list, submit_options: list[str], *, rss: int) -> Outcome:
    """``inputs`` ingested by ``./spark-submit.sh [submit_options] jobs/ingest_csv.py``, a JVM
    of its own, with the peak RSS of its whole process tree below ``rss``."""
    root = Path(__file__).resolve().parents[2]
    cfg = config.validate({"inputs": [str(i) for i in inputs], "topic": f"hostile-{tmp_path.name}",
                           "bootstrap_servers": kafka.bootstrap_servers, "metrics_dir": str(tmp_path / "metrics")})  # fmt: skip
    command = [str(root / "spark-submit.sh"), "--master", "local[2]", *submit_options, str(root / "jobs" / "ingest_csv.py"),
               *[a for i in cfg.inputs for a in ("--input", i)], "--topic", cfg.topic, "--run-id", cfg.run_id,
               "--bootstrap-servers", cfg.bootstrap_servers, "--metrics-dir", cfg.metrics_dir, "--quiet"]  # fmt: skip
    usage = run_measured(command, cwd=str(tmp_path), timeout_s=HANG_S)
    code, wall, peak = usage.returncode, usage.wall_s, usage.peak_rss_mb * 2**20
    error = usage.stderr.strip().splitlines()[-1] if code else None
    summary_file = Path(cfg.metrics_dir) / "runs" / cfg.run_id / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
    records = (
        consume_all(kafka.bootstrap_servers, cfg.topic) if topic_exists(kafka.bootstrap_servers, cfg.topic) else None
    )
    print(f"{tmp_path.name}: exit {code} in {wall:.1f} s, process tree peak {peak / GIB:.2f} GiB; {error or ''}")
    assert peak < rss, f"the job's process tree peaked at {peak / GIB:.2f} GiB"
    return Outcome(cfg, code, error, summary, records, wall, int(peak))


def assert_refused(out: Outcome, *needles: str, before_spark: bool = True) -> None:
    """Exit 3, one line naming the cause (each of ``needles``), nothing committed to the topic,
    the run's report saying so; ``before_spark``: refused before Spark ran a job for it."""
    assert out.exit_code == 3, out.error
    assert out.error is not None and "\n" not in out.error, out.error
    for needle in needles:
        assert needle in out.error, out.error
    assert not out.records, f"{len(out.records)} records committed by a refused run"
    assert out.summary is not None, "no summary.json for a refused run"
    assert out.summary["status"] == "failed" and out.summary["error"] == out.error
    if before_spark:
        assert out.spark_jobs == 0, f"refused after Spark ran {out.spark_jobs} job(s)"
    else:
        assert out.spark_jobs > 0, "refused before Spark read the input"


def assert_sent_all(out: Outcome, expected: Counter, quarantined: int = 0) -> None:
    """Exit 0, the topic holds exactly the expected rows, the counts reconcile."""
    assert out.exit_code == 0, out.error
    assert out.summary is not None and out.records is not None
    assert rows(out.records) == expected
    s = out.summary
    assert s["status"] == "succeeded" and s["rows_sent"] == sum(expected.values()) == len(out.records)
    assert s["rows_quarantined"] == quarantined and s["rows_read"] == s["rows_sent"] + s["rows_quarantined"]
    assert all(c["ok"] for c in s["checks"]), s["checks"]


def expected_of(text_rows: list[dict]) -> Counter:
    return Counter(json.dumps(r, sort_keys=True) for r in text_rows)


def ledger_tallies(out: Outcome) -> dict[str, int]:
    entries = metrics_store.rows(out.cfg.metrics_dir, "ledger", out.cfg.run_id)
    return {k: sum(e[k] for e in entries) for k in ("rows_read", "rows_sent", "rows_quarantined")}


# -- 1-3, 11: sizes ----------------------------------------------------------------------------


def test_01_an_empty_file_is_refused_naming_it(spark, kafka, tmp_path):
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    out = attempt(spark, kafka, tmp_path, [path])
    assert_refused(out, str(path), "empty (0 bytes)")
    assert out.records is None


def test_02_a_header_alone_sends_nothing_and_succeeds(spark, kafka, tmp_path):
    path = tmp_path / "header.csv"
    path.write_text("id,name,amount\n")
    out = attempt(spark, kafka, tmp_path, [path])
    assert_sent_all(out, Counter())
    assert out.summary["rows_read"] == 0 and out.summary["headers"][0]["columns"] == ["id", "name", "amount"]


def test_03_a_100_mb_line_is_quarantined_for_its_size_and_the_rest_sent(kafka, tmp_path):
    path = tmp_path / "huge.csv"
    with open(path, "wb") as f:
        f.write(b"id,text\n" + b"".join(b"%d,before %d\n" % (i, i) for i in range(1, 501)))
        f.write(b"501,")
        block = b"0123456789abcdef" * 65536  # 1 MiB
        for _ in range(95):
            f.write(block)
        f.write(block[: 100_000_000 - 95 * len(block)])
        f.write(b"\n" + b"".join(b"%d,after %d\n" % (i, i) for i in range(502, 1002)))
    size = path.stat().st_size
    assert size > 100_000_000
    # Spark's JVM holds a line several times over (its line reader's buffer, and a row buffer
    # per projection, each doubled as it grows): a 100 MB line takes a JVM to ~2 GiB of heap,
    # which the shared session, after the suite's other tests, may no longer have. So this
    # run is a job of its own, given the memory docs/records.md says such a line needs, as a user
    # gives it: spark-submit.sh --driver-memory. Each Python worker parsing the line holds a few
    # copies (~0.5 GiB), and two parse it (the sending pass, the quarantine's).
    out = attempt_submitted(kafka, tmp_path, [path], ["--driver-memory", "2500m"], rss=5 * GIB)
    expected = expected_of([{"id": str(i), "text": f"{'before' if i < 501 else 'after'} {i}"}
                            for i in range(1, 1002) if i != 501])  # fmt: skip
    assert_sent_all(out, expected, quarantined=1)
    [(reason, count)] = out.summary["quarantine"]["reasons"].items()
    assert count == 1
    record = int(reason.split()[2].replace(",", ""))
    assert 100_000_000 < record < 100_001_000, reason
    assert reason == f"record of {record:,} bytes exceeds the producer's max.request.size (1,000,000)"
    assert ledger_tallies(out) == {"rows_read": 1001, "rows_sent": 1000, "rows_quarantined": 1}
    # The quarantine holds the line as read, all 100 MB of it.
    [written] = [p for p in (out.run_dir / "quarantine").glob("*.json") if p.stat().st_size > 0]
    assert 100_000_000 < written.stat().st_size < 100_001_000


def test_11_ten_thousand_columns(spark, kafka, tmp_path):
    path = tmp_path / "wide.csv"
    columns = [f"col{i}" for i in range(10_000)]
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for r in range(50):
            w.writerow([f"{r}.{i}" if (r + i) % 7 else "" for i in range(10_000)])
    out = attempt(spark, kafka, tmp_path, [path])
    assert_sent_all(out, expected_rows(path))
    assert list(out.records[0].value["data"]) == columns  # header order kept


# -- 4-8: bytes that are not what they seem ----------------------------------------------------


def test_04_nul_bytes_inside_fields_are_sent_faithfully(spark, kafka, tmp_path):
    path = tmp_path / "nul.csv"
    path.write_bytes(b'id,v\n1,a\x00b\n2,\x00\n3,"x\x00,\x00y"\n4,plain\n')
    out = attempt(spark, kafka, tmp_path, [path])
    assert_sent_all(out, expected_rows(path))
    raw = {r.value["data"]["id"]: r.raw_value for r in out.records}
    assert b'"v":"a\\u0000b"' in raw["1"] and b'"v":"x\\u0000,\\u0000y"' in raw["3"]


def test_05_random_bytes_named_csv_are_refused_as_not_text(spark, kafka, tmp_path):
    path = tmp_path / "random.csv"
    path.write_bytes(os.urandom(200_000))
    out = attempt(spark, kafka, tmp_path, [path])
    assert_refused(out, str(path), "not a text file")
    assert out.records is None  # refused before the topic was made


def gzip_of_rows(tmp_path: Path, rows_: int) -> tuple[Path, bytes]:
    plain = datagen.generate("wide30", rows_, tmp_path / "src.csv")
    data = plain.read_bytes()
    plain.unlink()
    path = tmp_path / "in.csv.gz"
    path.write_bytes(gzip.compress(data))
    return path, data


def test_06_a_truncated_gzip_file_is_refused_as_damaged_and_nothing_of_it_committed(spark, kafka, tmp_path):
    path, _ = gzip_of_rows(tmp_path, 5000)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    out = attempt(spark, kafka, tmp_path, [path])
    assert_refused(out, f"could not read {path}: EOFException: Unexpected end of input stream", "damaged",
                   "once the file is fixed, --incremental sends the 1 splits", before_spark=False)  # fmt: skip
    assert out.records == []  # the topic was made, its task's transaction aborted
    assert out.summary["rows_sent"] == 0 and out.summary["ledger"]["missing"]


def test_07_a_gzip_file_with_trailing_garbage_is_refused_not_half_read(spark, kafka, tmp_path):
    path, _ = gzip_of_rows(tmp_path, 5000)
    path.write_bytes(path.read_bytes() + b"trailing garbage, not a gzip member\n" * 3)
    out = attempt(spark, kafka, tmp_path, [path])
    assert_refused(out, f"could not read {path}: IOException: not a gzip file", "damaged", before_spark=False)
    assert out.records == [] and out.summary["rows_sent"] == 0


def test_08_a_gzip_stream_named_csv_is_refused_with_the_name_it_needs(spark, kafka, tmp_path):
    path = tmp_path / "export.csv"
    path.write_bytes(gzip.compress(b"id,name\n1,x\n2,y\n"))
    out = attempt(spark, kafka, tmp_path, [path])
    assert_refused(out, str(path), "gzip-compressed", "export.csv.gz")


# -- 9, 10, 12-15: what a CSV line may hold ---------------------------------------------------


def no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    names = [k for k, _ in pairs]
    assert len(names) == len(set(names)), f"duplicate names in a JSON object: {names}"
    return dict(pairs)


def test_09_duplicate_column_names_are_made_unique_as_spark_does(spark, kafka, tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("id,name,ID\n1,a,one\n2,b,two\n")
    out = attempt(spark, kafka, tmp_path, [path])
    assert out.exit_code == 0, out.error
    for r in out.records:
        json.loads(r.raw_value, object_pairs_hook=no_duplicate_keys)
    assert sorted((r.value["data"] for r in out.records), key=str) == [
        {"id0": "1", "name": "a", "ID2": "one"},
        {"id0": "2", "name": "b", "ID2": "two"},
    ]
    assert out.summary["headers"][0]["columns"] == ["id0", "name", "ID2"]


def test_10_an_empty_column_name_becomes_its_position(spark, kafka, tmp_path):
    path = tmp_path / "blank.csv"
    path.write_text("a,,c\n1,2,3\n4,,6\n")
    out = attempt(spark, kafka, tmp_path, [path])
    assert out.exit_code == 0, out.error
    assert sorted((r.value["data"] for r in out.records), key=str) == [
        {"a": "1", "_c1": "2", "c": "3"},
        {"a": "4", "_c1": None, "c": "6"},
    ]


def test_12_an_unterminated_quote_at_the_end_is_quarantined_the_rest_sent(spark, kafka, tmp_path):
    path = tmp_path / "open.csv"
    good = 'id,text\n1,plain\n2,"quoted, with comma"\n3,"say ""hi"""\n4,\n5,last good\n6,x\n'
    path.write_text(good + '7,"abc')  # no closing quote, no line end
    out = attempt(spark, kafka, tmp_path, [path])
    (tmp_path / "good.csv").write_text(good)
    assert_sent_all(out, expected_rows(tmp_path / "good.csv"), quarantined=1)
    assert out.summary["quarantine"]["reasons"] == {REASON_QUOTES: 1}
    lines = [
        json.loads(line) for p in (out.run_dir / "quarantine").glob("*.json") for line in p.read_text().splitlines()
    ]
    assert [(q["line"], q["reason"]) for q in lines] == [('7,"abc', REASON_QUOTES)]


def test_13_mixed_crlf_and_lf_line_ends(spark, kafka, tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_bytes(b'id,a,b\r\n1,x,y\n2,p,q\r\n3,"m",n\n4,,z\r\n5,last,row')
    out = attempt(spark, kafka, tmp_path, [path])
    assert_sent_all(out, expected_rows(path))
    assert len(out.records) == 5
    assert not any("\r" in (v or "") for r in out.records for v in [*r.value["data"], *r.value["data"].values()])


def test_14_a_bom_in_the_middle_of_the_file_is_data(spark, kafka, tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffid,name\n1,a\n\ufeff2,b\n3,\ufeffc\n".encode())
    out = attempt(spark, kafka, tmp_path, [path])
    assert_sent_all(out, expected_rows(path))
    ids = sorted(r.value["data"]["id"] for r in out.records)
    assert ids == ["1", "3", "\ufeff2"]  # only the file's first BOM is taken off, as the csv module does


def test_15_invalid_utf8_in_the_header_is_refused_naming_the_offset(spark, kafka, tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(b"id,na\xefme\n1,x\n")
    out = attempt(spark, kafka, tmp_path, [path])
    assert_refused(out, str(path), "header is not valid utf-8", "byte offset 5", "--encoding")


# -- 16, 17: files that change while the run reads them ----------------------------------------


class WhenSending(threading.Thread):
    """Does ``act`` once the run's first records are in the topic (its high watermark
    moved: mid-run, the run being throttled), within a bound."""

    def __init__(self, bootstrap: str, topic: str, act) -> None:
        super().__init__(name="mid-run", daemon=True)
        self.bootstrap, self.topic, self.act = bootstrap, topic, act
        self.acted_at: float | None = None

    def run(self) -> None:
        from kappa_ingest.errors import KafkaUnavailable
        from kappa_ingest.kafka.topics import Admin

        deadline = time.monotonic() + 60
        with Admin(self.bootstrap) as admin:  # fresh metadata each ask: the run creates the topic
            while time.monotonic() < deadline:
                try:
                    if sum(admin.end_offsets(self.topic, timeout_s=2).values()) > 0:
                        break
                except KafkaUnavailable:
                    pass
                time.sleep(0.05)
            else:
                return
        self.act()
        self.acted_at = time.monotonic()


def changing_input(tmp_path: Path, files: int, rows_each: int) -> list[Path]:
    return [datagen.generate("wide30", rows_each, tmp_path / "in" / f"part-{i}.csv", seed=i) for i in range(files)]


def assert_changed_and_consistent(out: Outcome, path: Path, what: str) -> dict:
    """Exit 3 naming the file; what the topic holds is what the report says was sent."""
    assert out.exit_code == 3, out.error
    assert f"input {path} changed while the run read it ({what}" in out.error and "\n" not in out.error
    s = out.summary
    assert s["status"] == "failed" and s["error"] == out.error
    assert len(out.records) == s["rows_sent"]  # nothing sent that the report does not count
    assert all(c["ok"] for c in s["checks"]), s["checks"]
    return s


def test_16_a_file_deleted_while_read_is_named_and_the_report_matches_the_topic(spark, kafka, tmp_path):
    paths = changing_input(tmp_path, 4, 5000)
    expected = sum((expected_rows(p) for p in paths), Counter())
    victim = paths[-1]
    topic = f"hostile-{tmp_path.name}"
    mid_run = WhenSending(kafka.bootstrap_servers, topic, victim.unlink)
    out = attempt(spark, kafka, tmp_path, [tmp_path / "in"], during=mid_run, target_rate=8000)
    assert mid_run.acted_at is not None and not victim.exists()
    assert_changed_and_consistent(out, victim, "deleted or moved")
    got = rows(out.records)
    assert not (got - expected), "a committed row that no input file holds"


def test_17_a_file_truncated_while_read_is_named_and_the_report_matches_the_topic(spark, kafka, tmp_path):
    [victim] = changing_input(tmp_path, 1, 200_000)
    size = victim.stat().st_size
    topic = f"hostile-{tmp_path.name}"
    mid_run = WhenSending(kafka.bootstrap_servers, topic, lambda: os.truncate(victim, size // 10))
    out = attempt(spark, kafka, tmp_path, [victim], during=mid_run, target_rate=20_000)
    assert mid_run.acted_at is not None
    s = assert_changed_and_consistent(out, victim, f"size {size:,} -> {size // 10:,} bytes")
    assert s["rows_sent"] < 200_000  # what the truncation took was never read, and the error says so


# -- 18-21: inputs that are not files to read ----------------------------------------------------


def test_18_an_unreadable_input_is_refused_before_spark(kafka, tmp_path):
    """The command run by a user who may not read the file. The suite runs as root, who reads
    any file: this run is root without the capabilities that pass file permissions by
    (setpriv's bounding set: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a mode-000 file
    is as unreadable to it as to anyone else."""
    path = tmp_path / "x.csv"
    path.write_text("a\n1\n")
    path.chmod(0)
    metrics = tmp_path / "m"
    done = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m",
                           "kappa_ingest.cli", "ingest", "--input", str(path), "--topic", "unreadable", "--run-id",
                           "unreadable", "--bootstrap-servers", kafka.bootstrap_servers, "--metrics-dir", str(metrics)],
                          capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
    assert done.returncode == 3, done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.startswith("kappa-ingest:")]
    assert "not readable" in line and str(path) in line, line
    assert "Setting default log level" not in done.stderr  # Spark's first words: it never started
    summary = json.loads((metrics / "runs" / "unreadable" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] in line
    assert not topic_exists(kafka.bootstrap_servers, "unreadable")


def test_18b_a_fifo_in_a_landing_directory_is_refused_not_skipped(spark, kafka, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("a\n1\n")
    os.mkfifo(tmp_path / "in" / "b.csv")
    out = attempt(spark, kafka, tmp_path, [tmp_path / "in"])
    assert_refused(out, str(tmp_path / "in" / "b.csv"), "not a regular file")


def test_19_a_glob_matching_nothing_is_refused(spark, kafka, tmp_path):
    out = attempt(spark, kafka, tmp_path, [tmp_path / "nothing-*.csv"])
    assert_refused(out, "no file matches", "--input")


def test_20_a_directory_without_csv_files_is_refused(spark, kafka, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("not csv\n")
    out = attempt(spark, kafka, tmp_path, [tmp_path / "in"])
    assert_refused(out, str(tmp_path / "in"), "no .csv or .csv.gz files")


@pytest.mark.parametrize("given", ["file", "directory"])
def test_21_a_symlink_loop_is_refused_naming_it(spark, kafka, tmp_path, given):
    d = tmp_path / "in"
    d.mkdir()
    (d / "ok.csv").write_text("a\n1\n")
    os.symlink(d / "b.csv", d / "a.csv")
    os.symlink(d / "a.csv", d / "b.csv")
    out = attempt(spark, kafka, tmp_path, [d / "a.csv" if given == "file" else d])
    assert_refused(out, "symbolic link loop", f"{d}/a.csv" if given == "file" else f"(in --input {d})")


# -- 22: records larger than the topic takes -----------------------------------------------------


def small_topic(kafka, tmp_path: Path, max_bytes: int = 200_000) -> str:
    topic = f"hostile-{tmp_path.name}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 2, 1, config={"max.message.bytes": str(max_bytes)})])[topic].result(15)
    return topic


def with_a_big_row(tmp_path: Path, rows_: int = 3000) -> tuple[Path, str]:
    """Normal rows (together more than the topic's limit: the producers' batches must stay
    under it too) and one row of a 300 KB field."""
    path = tmp_path / "orders.csv"
    big = "B" * 300_000
    lines = [f"{i},customer {i},{i * 1.5}" for i in range(1, rows_ + 1)]
    lines.insert(rows_ // 2, f"big,{big},0")
    path.write_text("id,name,amount\n" + "\n".join(lines) + "\n")
    return path, big


@pytest.mark.parametrize("sink", ["confluent", "spark"])
def test_22_a_record_over_the_topics_max_message_bytes_is_quarantined(spark, kafka, tmp_path, sink):
    small_topic(kafka, tmp_path)
    path, big = with_a_big_row(tmp_path)
    out = attempt(spark, kafka, tmp_path, [path], sink=sink)
    limit = csv.field_size_limit(1 << 20)  # the csv module's own limit is 128 KiB a field
    try:
        _, good, _ = csv_rows(path)
    finally:
        csv.field_size_limit(limit)
    assert_sent_all(out, expected_of([r for r in good if r["id"] != "big"]), quarantined=1)
    [(reason, count)] = out.summary["quarantine"]["reasons"].items()
    record = int(reason.split()[2].replace(",", ""))
    assert count == 1 and 300_000 < record < 300_600
    assert reason == f"record of {record:,} bytes exceeds the topic's max.message.bytes (200,000)"
    assert out.summary["broker"]["max_record_bytes"] == 200_000
    assert ledger_tallies(out) == {"rows_read": 3001, "rows_sent": 3000, "rows_quarantined": 1}
    [q] = [json.loads(line) for p in (out.run_dir / "quarantine").glob("*.json") for line in p.read_text().splitlines()]
    assert q["line"] == f"big,{big},0" and q["reason"] == reason and canonical_file(q["source_file"]) == str(path)


def test_22_strict_size_refuses_the_run_naming_the_row(spark, kafka, tmp_path):
    small_topic(kafka, tmp_path)
    path, _ = with_a_big_row(tmp_path, rows_=10)
    out = attempt(spark, kafka, tmp_path, [path], strict_size=True)
    assert_refused(
        out, f"input {path}, line 7: record of ", "max.message.bytes (200,000)", "--strict-size", before_spark=False
    )
    assert out.records == []


# -- 23: names ------------------------------------------------------------------------------------


def test_23_a_path_with_spaces_and_non_ascii_characters(spark, kafka, tmp_path):
    d = tmp_path / "my data"
    d.mkdir()
    path = d / "naïve café.csv"
    path.write_text("id,city\n1,Zürich\n2,Besançon\n", encoding="utf-8")
    out = attempt(spark, kafka, tmp_path, [path])
    assert_sent_all(out, expected_rows(path))
    for r in out.records:
        assert r.value["source_file"].startswith("file:/") and "/my%20data/naïve%20café.csv" in r.value["source_file"]
        assert canonical_file(r.value["source_file"]) == str(path)
        assert r.headers["source_file"].decode() == r.value["source_file"]
    assert out.summary["plan"]["files"][0]["path"] == str(path)
    assert [canonical_file(f) for f in out.summary["headers"][0]["files"]] == [str(path)]
