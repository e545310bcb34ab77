"""Two live runs on the same files never both commit them: a run paused past its lease and
taken over from another host, an executor paused while Spark retried its task and another
run sent the same files, and two runs started together without the lock.

The runs are scheduled ones (``--incremental``) over a landing directory: whatever they
overlap, the topic must hold every row once. Each test makes its fault with real processes
(SIGSTOP/SIGCONT, a host of its own with ``unshare --uts``), shows that it landed while rows
were being sent, and reads the topic back ``read_committed``."""

from __future__ import annotations

import signal
from collections import Counter

import psutil
import pytest

from faults import (
    Releaser,
    aborted,
    assert_c_loops,
    assert_delivered,
    barrier,
    claim_age_ms,
    cli,
    committed,
    committed_rows,
    error_lines,
    executor_id,
    executor_of,
    in_log,
    landed_mid_send,
    released_together,
    signal_tree,
    spark_executor_active,
    stop_group,
    summary,
    tree,
    wait_for,
)
from helpers import consume_all, expected_rows
from kappa_ingest import datagen, failpoints
from kappa_ingest.config.choices import DEFAULT_LEDGER_TOPIC as DEFAULT_TOPIC
from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery import lock
from kappa_ingest.delivery.ledger import read_records
from kappa_ingest.kafka.broker import free_port
from kappa_ingest.kafka.settings import connection_conf
from kappa_ingest.source.splits import Unit, canonical_file

pytestmark = [pytest.mark.integration, pytest.mark.faults]
FILES, ROWS_EACH = 6, 4_000


@pytest.fixture
def landing(tmp_path):
    """A landing directory of six files: six units of a scheduled run."""
    directory = tmp_path / "landing"
    paths = [datagen.generate("wide30", ROWS_EACH, directory / f"part-{i}.csv", seed=20 + i) for i in range(FILES)]
    return directory, sum((expected_rows(p) for p in paths), Counter())


def _args(directory, topic: str, metrics, *extra: str) -> list[str]:
    return ["--input", str(directory), "--topic", topic, "--incremental", "--metrics-dir", str(metrics), "--quiet",
            *extra]  # fmt: skip


def _unit_of(topic: str, txid: str, directory) -> str:
    """The file whose unit (a whole file: a scheduled run's split is 64 MiB) has transactional id ``txid``."""
    scope = delivery.scope_prefix(topic, "", incremental=True)
    for path in sorted(directory.glob("*.csv")):
        if delivery.unit_id(scope, Unit(canonical_file(str(path)), 0, path.stat().st_size)) == txid:
            return path.name
    raise AssertionError(f"no unit of {directory} has transactional id {txid}")


def _claims(bootstrap: str, topic: str) -> dict:
    conf = connection_conf(None, bootstrap)
    return lock.claims(read_records(conf, DEFAULT_TOPIC, isolation="read_uncommitted"), topic)


def test_a_run_paused_past_its_lease_is_taken_over_from_another_host_and_stops(kafka, tmp_path, landing):
    directory, expected = landing
    bs, topic, metrics = kafka.bootstrap_servers, "paused-run", tmp_path / "m"
    common = [*_args(directory, topic, metrics), "--bootstrap-servers", bs, "--master", "local[2]", "--lock-lease", "8"]
    first = cli(*common, "--target-rate", "4000", "--run-id", "paused", log=tmp_path / "paused.log")
    try:
        wait_for(lambda: committed(bs, "paused"), 120, "a unit committed", first, tmp_path / "paused.log")
        landed_mid_send(bs, ["paused"], FILES * ROWS_EACH)
        whole = tree(psutil.Process(first.pid))  # the driver, its JVM, its Python workers (a group of their own)
        signal_tree(whole, signal.SIGSTOP)
        paused_with = committed_rows(bs, "paused")
        # Past its lease of 8 s, on the brokers' clock (the lock's): its claim is dead.
        wait_for(lambda: claim_age_ms(bs, topic, "paused") > 8000, 60, "the paused run's lease run out")
        second = cli(*common, "--run-id", "successor", log=tmp_path / "successor.log", hostname="another-host")
        try:
            assert second.wait(180) == 0, (tmp_path / "successor.log").read_text()[-3000:]
        finally:
            stop_group(second)
        signal_tree(whole, signal.SIGCONT)
        rc = first.wait(120)
    finally:
        stop_group(first)
    assert rc == 6, (tmp_path / "paused.log").read_text()[-3000:]
    [line] = error_lines(tmp_path / "paused.log")
    assert "lost its lock" in line or "taken over by run successor" in line, line
    taker = summary(metrics, "successor")
    assert taker["delivery"]["lock"]["taken_over_from"] == ["paused"], taker["delivery"]["lock"]
    assert taker["rows_sent"] + taker["delivery"]["rows_skipped"] >= FILES * ROWS_EACH - paused_with
    reports = [taker, summary(metrics, "paused")]
    for r in reports:
        assert_c_loops(r)
    assert_delivered(consume_all(bs, topic), expected, reports)


def test_an_executor_paused_while_its_task_is_retried_and_another_run_sends_the_same_files(kafka, tmp_path, landing):
    """The first run's executor stops mid-unit, its unit's first records in the log; Spark
    declares it lost and runs its task again on the other executor, while a second run (the
    lock bypassed) sends the same files; then the paused executor wakes and goes on sending
    the unit it had begun. Its transaction was fenced: its records there are aborted."""
    directory, expected = landing
    bs, topic, metrics = kafka.bootstrap_servers, "zombie-executor", tmp_path / "m"
    held, log = tmp_path / "held", tmp_path / "first.log"
    held.mkdir()
    ui = free_port()
    lost_fast = ["--spark-conf", "spark.network.timeout=12s", "--spark-conf", "spark.network.timeoutInterval=1s",
                 "--spark-conf", "spark.executor.heartbeatInterval=1s", "--spark-conf", f"spark.ui.port={ui}"]  # fmt: skip
    first = cli(*_args(directory, topic, metrics, "--bootstrap-servers", bs, "--master", "local-cluster[2,1,1024]",
                       "--target-rate", "3000", "--run-id", "first", *lost_fast), log=log,
                env={failpoints.ENV: f"{failpoints.MID_SEND}:{held}"})  # fmt: skip
    releasing = Releaser(held, failpoints.MID_SEND)
    try:
        wait_for(lambda: committed(bs, "first"), 180, "a unit committed", first, log)
        landed_mid_send(bs, ["first"], FILES * ROWS_EACH)
        # The next unit to begin is held at its first records; once they are in the log, its
        # executor stops (its JVM, its Python daemon and workers).
        releasing.pause()
        marker = releasing.next_held(first, log)
        unit = _unit_of(topic, marker.name.removesuffix(f".{failpoints.MID_SEND}"), directory)
        wait_for(lambda: in_log(bs, topic, "first", unit) > 0, 60, "its first records in the log", first, log)
        paused = tree(executor_of(int(marker.read_text())))
        lost = executor_id(paused[0])  # now: once given up, its worker may kill the JVM
        signal_tree(paused, signal.SIGSTOP)
        releasing.resume()
        try:
            second = cli(*_args(directory, topic, metrics, "--bootstrap-servers", bs, "--master", "local[2]",
                                "--no-lock", "--run-id", "second"), log=tmp_path / "second.log")  # fmt: skip
            try:  # it sends the held unit too: its transactional id initialised, the paused writer's fenced
                assert second.wait(180) in (0, 6), (tmp_path / "second.log").read_text()[-3000:]
            finally:
                stop_group(second)
            assert any(e.unit.file.endswith(unit) for e in committed(bs, "second") + committed(bs, "first"))
            # Given up while the first run goes on, or the run already over (its task run again
            # elsewhere while the second run sent): either way the paused executor wakes fenced.
            wait_for(lambda: first.poll() is not None or spark_executor_active(ui, lost) is False, 120,
                     "the paused executor given up")  # fmt: skip
        finally:
            signal_tree(paused, signal.SIGCONT)
        rc = first.wait(180)
    finally:
        releasing.stop()
        stop_group(first)
    out = log.read_text()
    assert rc in (0, 6), out[-3000:]
    reports = [summary(metrics, "first"), summary(metrics, "second")]
    assert reports[0]["duplicates"]["failed_attempts"], "Spark did not run the paused executor's task again"
    assert aborted(bs, topic, "first", unit) > 0, "the paused executor's transaction was not fenced"
    for r in reports:
        assert_c_loops(r)
    assert_delivered(consume_all(bs, topic), expected, reports)


def test_two_runs_of_the_same_files_started_together_without_the_lock_send_each_row_once(kafka, tmp_path, landing):
    directory, expected = landing
    bs, topic, metrics = kafka.bootstrap_servers, "no-lock-together", tmp_path / "m"
    env, hook = barrier(tmp_path)
    runs = {}
    for run_id in ("left", "right"):
        runs[run_id] = cli(*_args(directory, topic, metrics, "--bootstrap-servers", bs, "--master", "local[2]",
                                  "--no-lock", "--target-rate", "6000", "--run-id", run_id),
                           log=tmp_path / f"{run_id}.log", env=env)  # fmt: skip
    codes = released_together(runs, hook)
    assert set(codes.values()) <= {0, 6}, {r: (tmp_path / f"{r}.log").read_text()[-2000:] for r in runs}
    assert not _claims(bs, topic), "a run without the lock took it"
    reports = [summary(metrics, r) for r in runs]
    # Each unit was sent by one of them: what each sent adds up to the input.
    assert sum(r["rows_sent"] for r in reports) == FILES * ROWS_EACH, [r["rows_sent"] for r in reports]
    for r in reports:
        assert_c_loops(r)
    assert_delivered(consume_all(bs, topic), expected, reports)
