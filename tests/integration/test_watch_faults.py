"""A watch's driver killed (``kill -9`` of its process group, Python and the JVM, and of its
Python workers' group) at each moment of a batch: with its next batch chosen, mid-send with a transaction open,
and between the commit and the clean-up; and in its first discovery, while it records
the files it passes over. Each next start takes the dead watch's lock over,
and the last ends with every row once in the topic (a ``read_committed`` consumer) and the
sent files moved, none sent again. An executor killed mid-batch, and the only broker, are
ridden out by the running watch."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from pathlib import Path

import pytest

from faults import cli, executor_of, sent_so_far, stop_group, summary, topic_exists, wait_for
from helpers import consume_all, expected_rows, held_back, rows
from kappa_ingest import datagen, failpoints

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def _land(landing: Path, name: str, n: int, seed: int) -> Path:
    scratch = landing.parent / f"{name}.writing"
    datagen.generate("debs2012", n, scratch, seed=seed)
    os.replace(scratch, landing / name)
    return landing / name


def _held_pid(held: Path, point: str) -> int:
    [marker] = held.glob(f"*.{point}")
    return int(marker.read_text())


def _kill_all(proc, holder: int) -> None:
    """``kill -9`` of the watch's process group and of the held process's: PySpark's worker
    daemon puts itself and its workers in a group of their own, and a worker left alive at
    a held point would go on once released, and could commit its unit before the next start
    fenced it (seen in two fresh-clone runs: that start then rightly found f1 sent)."""
    try:
        group = os.getpgid(holder)
    except ProcessLookupError:
        group = None
    os.killpg(proc.pid, signal.SIGKILL)
    if group is not None and group != proc.pid:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)


def test_a_watch_killed_at_each_moment_of_a_batch_loses_and_duplicates_nothing(kafka, tmp_path):
    landing, done, metrics, held = (tmp_path / d for d in ("landing", "done", "metrics", "held"))
    landing.mkdir()
    held.mkdir()
    topic = "watch-killed"
    common = ["--input", str(landing), "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
              "--metrics-dir", str(metrics), "--min-file-age", "0.3", "--master", "local[1]",
              "--after-send", f"move:{done}", "--partitions", "2"]  # fmt: skip
    first = None
    for i, point in enumerate((failpoints.WATCH_CHOSEN, failpoints.MID_SEND, failpoints.WATCH_SENT)):
        log = tmp_path / f"watch-{i}.log"
        proc = cli(*common, "--run-id", f"killed-{i}", log=log, command="watch",
                   env={failpoints.ENV: f"{point}:{held}"})  # fmt: skip
        try:
            if first is None:  # the first start passes over what is there: land after it
                wait_for(lambda log=log: "watching " in log.read_text(), 180, "watching", proc, log)
                first = _land(landing, "f1.csv", 3000, 1)
            wait_for(lambda point=point: any(held.glob(f"*.{point}")), 180, f"held at {point}", proc, log)
            holder = _held_pid(held, point)
            assert holder > 0
            _kill_all(proc, holder)
        finally:
            stop_group(proc)
        for marker in held.iterdir():
            marker.unlink()
        # What each kill left: nothing sent (the batch chosen); a transaction open on the
        # topic, holding read_committed readers back (mid-send); all of f1 in the topic and
        # f1 still in the landing (after the commit, before the clean-up).
        if point == failpoints.WATCH_CHOSEN:
            assert not topic_exists(kafka.bootstrap_servers, topic) or sent_so_far(kafka.bootstrap_servers, topic) == 0
        elif point == failpoints.MID_SEND:
            wait_for(lambda: held_back(kafka.bootstrap_servers, topic), 10, "the open transaction seen by the broker")
        else:
            assert rows(consume_all(kafka.bootstrap_servers, topic)) == expected_rows(first) and first.exists()
    assert first is not None
    sent_f1 = expected_rows(done / "f1.csv") if (done / "f1.csv").exists() else expected_rows(first)
    log = tmp_path / "watch-last.log"
    proc = cli(*common, "--run-id", "last", log=log, command="watch")
    try:
        wait_for(lambda: (done / "f1.csv").exists(), 180, "f1 moved at the start", proc, log)
        second = _land(landing, "f2.csv", 2000, 2)
        f2_rows = expected_rows(second)
        wait_for(lambda: (done / "f2.csv").exists(), 180, "f2 sent and moved", proc, log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    finally:
        stop_group(proc)
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == sent_f1 + f2_rows
    assert "1 file(s), 2,000 rows sent" in log.read_text()  # f1 was moved, not sent again
    # The mid-send kill left a transaction open: the next start ended it (its lock's takeover).
    [report] = [json.loads(p.read_text()) for p in (metrics / "runs").glob("killed-2-b*/summary.json")]
    lock = report["delivery"]["lock"]
    assert "killed-1" in lock["taken_over_from"] and lock.get("lingering_transactions_ended", 0) >= 1, lock


def test_a_watch_killed_in_its_first_discovery_passes_over_the_same_files_and_sends_the_rest(kafka, tmp_path):
    """Killed while its first start records what it passes over (the files there passed, the
    start itself not yet recorded): the next start is the first again, passes over the same
    files (and any that landed meanwhile, there at the start that counts), and sends what
    lands after it, once."""
    landing, metrics, held = (tmp_path / d for d in ("landing", "metrics", "held"))
    landing.mkdir()
    held.mkdir()
    topic = "watch-killed-first"
    common = ["--input", str(landing), "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
              "--metrics-dir", str(metrics), "--min-file-age", "0.3", "--master", "local[1]"]  # fmt: skip
    _land(landing, "there.csv", 500, 1)
    log = tmp_path / "watch-0.log"
    proc = cli(*common, "--run-id", "first-0", log=log, command="watch",
               env={failpoints.ENV: f"{failpoints.WATCH_PASSED}:{held}"})  # fmt: skip
    try:
        wait_for(lambda: any(held.glob(f"*.{failpoints.WATCH_PASSED}")), 180, "held at its first start", proc, log)
        _kill_all(proc, _held_pid(held, failpoints.WATCH_PASSED))
    finally:
        stop_group(proc)
    assert "watching " not in log.read_text()  # killed before it watched
    _land(landing, "meanwhile.csv", 300, 2)
    log = tmp_path / "watch-1.log"
    proc = cli(*common, "--run-id", "first-1", log=log, command="watch")
    try:
        wait_for(lambda: "watching " in log.read_text(), 180, "watching", proc, log)
        after = _land(landing, "after.csv", 400, 3)
        wait_for(lambda: "batch first-1-b00001: succeeded" in log.read_text(), 180, "after.csv sent", proc, log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    finally:
        stop_group(proc)
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == expected_rows(after)
    assert "1 file(s), 400 rows sent" in log.read_text()


def test_an_executor_killed_mid_batch_is_ridden_out_and_every_row_sent_once(kafka, tmp_path):
    """One of two executors killed (``kill -9``) while its task holds a transaction open: the
    task is tried again, the batch succeeds without a restart of the watch, every row once."""
    landing, metrics, held = (tmp_path / d for d in ("landing", "metrics", "held"))
    landing.mkdir()
    held.mkdir()
    topic = "watch-executor-lost"
    log = tmp_path / "watch.log"
    proc = cli("--input", str(landing), "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
               "--metrics-dir", str(metrics), "--min-file-age", "0.3", "--master", "local-cluster[2,1,1024]",
               "--partitions", "2", "--run-id", "lost", log=log, command="watch",
               env={failpoints.ENV: f"{failpoints.MID_SEND}:{held}"})  # fmt: skip
    try:
        wait_for(lambda: "watching " in log.read_text(), 240, "watching", proc, log)
        path = _land(landing, "f.csv", 4000, 5)
        wait_for(lambda: any(held.glob(f"*.{failpoints.MID_SEND}")), 180, "a task held mid-send", proc, log)
        marker = next(held.glob(f"*.{failpoints.MID_SEND}"))
        victim = executor_of(int(marker.read_text()))
        # Another application started in the same second has our application's id, and so
        # our work directory: its executor's own directory there must outlive our stop.
        work = Path(victim.cwd()).parent
        (work / "99").mkdir()
        (work / "99" / "stderr").write_text("a same-named application's executor\n")
        wait_for(lambda: held_back(kafka.bootstrap_servers, topic), 30, "the open transaction seen by the broker")
        victim.kill()
        victim.wait(30)

        def released_and_sent() -> bool:  # every hold let go from now on: the task's next attempt's too
            for m in held.glob(f"*.{failpoints.MID_SEND}"):
                m.unlink(missing_ok=True)
            return "batch lost-b00001: " in log.read_text()

        wait_for(released_and_sent, 240, "the batch ended", proc, log)
        assert "batch lost-b00001: succeeded, 1/1 file(s), 4,000 rows" in log.read_text(), log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    finally:
        stop_group(proc)
    try:
        assert [p.name for p in work.iterdir()] == ["99"], "our executors' directories kept, or another's removed"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = summary(metrics, "lost-b00001")
    assert report["duplicates"]["failed_attempts"], "the kill did not fail a sending task"
    assert report["delivery"]["transactions_aborted"] >= 1 and all(c["ok"] for c in report["checks"])
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == expected_rows(path)


def test_a_broker_down_mid_watch_is_ridden_out_and_every_row_sent_once(spark, tmp_path):
    """The watch's only broker killed (``kill -9``) while a file waits: the batch fails
    (Kafka unreachable), is retried while the broker is down, and once it is back the file
    is sent, with no restart of the watch; every row once."""
    from kappa_ingest import config
    from kappa_ingest.kafka import broker as local_kafka
    from kappa_ingest.pipeline.resources import RunResources
    from kappa_ingest.watch.loop import Watch
    from kappa_ingest.watch.settings import WatchSettings

    cluster = local_kafka.start(tmp_path / "kafka", brokers=1)
    landing = tmp_path / "landing"
    landing.mkdir()
    cfg = config.validate({"inputs": [str(landing)], "topic": "watch-outage", "metrics_dir": str(tmp_path / "m"),
                           "bootstrap_servers": cluster.bootstrap_servers, "run_id": "outage", "quiet": True})  # fmt: skip
    resources = RunResources(cfg, spark)
    watch = Watch(cfg, WatchSettings(str(landing), min_file_age_s=0.3, listing_period_s=1.0), resources, echo=False)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catching(watch.run, errors), daemon=True)
    thread.start()
    try:
        wait_for(watch.started.is_set, 120, "the watch started")
        first = _land(landing, "before.csv", 500, 1)
        wait_for(lambda: watch.summary.files_sent == 1, 120, "the first file sent")
        os.kill(cluster.brokers[0].pid, signal.SIGKILL)
        second = _land(landing, "during.csv", 700, 2)
        wait_for(lambda: any(b.status == "failed" for b in watch.summary.batches), 120, "a batch failed on the outage")
        assert watch.summary.files_sent == 1 and thread.is_alive() and not errors
        cluster = local_kafka.restart(cluster)
        wait_for(lambda: watch.summary.files_sent == 2, 180, "the file sent once the broker was back")
    finally:
        watch.stop()
        thread.join(120)
        resources.close()
        try:
            got = rows(consume_all(cluster.bootstrap_servers, "watch-outage"))
        finally:
            cluster.stop()
    assert not errors, errors
    assert got == expected_rows(first) + expected_rows(second)
    assert [b.status for b in watch.summary.batches][-1] == "succeeded"


def _catching(fn, errors: list) -> None:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the test thread asserts on it
        errors.append(e)
