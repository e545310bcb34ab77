"""The watch (``kappa-ingest watch``): each file landing in a directory reaches the topic
once, read back by a ``read_committed`` consumer; files there at the first start are passed
over, a restart sends what landed meanwhile and nothing twice, an overwritten file is
refused (or sent again as a new version), a file that cannot be sent goes to the error
directory with its reason, a sent one is moved, and the Prometheus endpoint says so. The
watch runs in the suite's Spark session; the command itself where it is what is tested
(SIGTERM, a second watch refused)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from pyarrow.fs import FileSelector

from helpers import consume_all, expected_rows, rows, s3_filesystem, s3_put
from kappa_ingest import config, datagen
from kappa_ingest.pipeline.resources import RunResources
from kappa_ingest.report import store as metrics_store
from kappa_ingest.watch.loop import Watch
from kappa_ingest.watch.settings import WatchSettings

pytestmark = pytest.mark.integration

WAIT_S = 120  # a bound on every wait for the watch, never a measurement


class Running:
    """A watch on the suite's session, on a thread of its own."""

    def __init__(self, spark, kafka, landing: Path | str, metrics: Path, topic: str, run_id: str, **settings) -> None:
        options = {k: settings.pop(k) for k in list(settings) if k in ("dead_letter_topic", "delivery", "s3_endpoint")}
        self.cfg = config.validate({"inputs": [str(landing)], "topic": topic, "bootstrap_servers": kafka.bootstrap_servers,
                                    "metrics_dir": str(metrics), "quiet": True, "run_id": run_id, **options})  # fmt: skip
        self.resources = RunResources(self.cfg, spark)
        self.watch = Watch(self.cfg, WatchSettings(landing=str(landing), min_file_age_s=0.3, listing_period_s=1.0,
                                                   **settings), self.resources, echo=False)  # fmt: skip
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.watch.run()
        except BaseException as e:  # noqa: BLE001 - the test thread raises it
            self.error = e

    def until(self, what, why: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not what():
            assert self.error is None, f"the watch failed: {self.error}"
            assert self.thread.is_alive(), "the watch ended"
            assert time.monotonic() < deadline, f"the watch did not get there: {why}; {self.watch.summary}"
            time.sleep(0.1)

    def listings(self, n: int) -> None:
        """Wait for ``n`` more full listings of the landing (what is there now has been looked at)."""
        self.until(lambda: self.watch._discovery is not None, "discovery on")
        d = self.watch._discovery
        start = d.listings
        self.until(lambda: d.listings >= start + n, f"{n} more listings")

    def sent(self, n: int) -> None:
        self.until(lambda: self.watch.summary.files_sent >= n, f"{n} files sent")

    def stop(self) -> None:
        self.watch.stop()
        self.thread.join(WAIT_S)
        self.resources.close()
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


def land(landing: Path, name: str, n: int, seed: int) -> Path:
    """A file written beside the landing and renamed into it, as a writer should."""
    scratch = landing.parent / f"{name}.writing"
    datagen.generate("debs2012", n, scratch, seed=seed)
    final = landing / name
    os.replace(scratch, final)
    return final


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    landing = tmp_path / "landing"
    landing.mkdir()
    return landing, tmp_path / "metrics"


def test_files_that_land_are_sent_once_and_a_restart_sends_what_landed_meanwhile(spark, kafka, tmp_path):
    landing, metrics = _dirs(tmp_path)
    topic = "watch-once"
    before = datagen.generate("debs2012", 50, landing / "before.csv", seed=9)  # there at the first start
    (landing / ".hidden.csv").write_text("a,b\n1,2\n")
    w = Running(spark, kafka, landing, metrics, topic, "watch-once-1")
    w.until(w.watch.started.is_set, "the first start's listing")
    a = land(landing, "a.csv", 400, 1)
    (landing / "b.csv.tmp").write_text("x,y\n")  # a writer's scratch name: never sent
    (landing / "_c.csv").write_text("x,y\n")
    w.sent(1)
    b = land(landing, "b.csv", 300, 2)
    w.sent(2)
    w.stop()
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == expected_rows(a) + expected_rows(b)
    assert {b.status for b in w.watch.summary.batches} == {"succeeded"}

    c = land(landing, "c.csv", 200, 3)  # while no watch runs
    again = Running(spark, kafka, landing, metrics, topic, "watch-once-2")
    again.sent(1)
    again.listings(2)
    again.stop()
    assert again.watch.summary.files_sent == 1  # a and b are seen again and sent nothing; before stays passed over
    got = rows(consume_all(kafka.bootstrap_servers, topic))
    assert got == expected_rows(a) + expected_rows(b) + expected_rows(c)
    assert not set(expected_rows(before)) & set(got)
    batch = again.watch.summary.batches[0].run_id
    report = json.loads((metrics / "runs" / batch / "summary.json").read_text())
    assert report["config"]["watch_id"] == "watch-once-2" and report["rows_sent"] == 200
    files = metrics_store.rows(metrics, "watch_files")
    assert sorted((f["watch_id"], Path(f["file"]).name, f["rows"]) for f in files) == [
        ("watch-once-1", "a.csv", 400), ("watch-once-1", "b.csv", 300), ("watch-once-2", "c.csv", 200)]  # fmt: skip
    assert all(f["committed_at"] >= f["landed_at"] and f["latency_s"] >= 0 for f in files)
    runs = metrics_store.rows(metrics, "runs")
    assert {r["run_id"]: r["watch_id"] for r in runs}[batch] == "watch-once-2"
    _shown_as_timelines(metrics, w.watch.summary, again.watch.summary)


def _shown_as_timelines(metrics: Path, *summaries) -> None:
    """``report --last``, the notebook's watch cell and the watch's page show each watch as its
    batches, from the store the watches wrote."""
    import nbformat

    import page_view
    from kappa_ingest.report import html, plots
    from kappa_ingest.report import text as report_text

    entries = metrics_store.last_entries(str(metrics), 5)
    assert [e.watch_id for e in entries] == [s.watch_id for s in reversed(summaries)]
    for view, summary in zip(reversed(entries), summaries, strict=True):
        assert [b.run_id for b in view.batches] == [b.run_id for b in summary.batches]
        assert len(view.files) == summary.files_sent and view.rows == summary.rows_sent
    text = report_text.last_lines(entries)
    assert text.count("succeeded") == sum(len(s.batches) for s in summaries) and "watch-once-1  " in text
    nb = nbformat.read(Path(__file__).parents[2] / "notebooks" / "ingest_rates.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.get("id") == "cell-watch")
    shown: list = []
    exec(cell, {"metrics_store": metrics_store, "report_text": report_text, "plots": plots, "show": shown.append,
                "METRICS_DIR": str(metrics)})  # fmt: skip
    assert len(shown) == 1 and len(shown[0].axes[0].collections[-1].get_offsets()) == summaries[-1].files_sent
    plots.plt.close(shown[0])
    page = page_view.ARTIFACTS / "report-watch-once-1.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(html.render_watch_html(entries[-1]))
    seen = page_view.view(page, page.with_suffix(".png"))
    assert seen.scroll_width <= seen.inner_width and [i["loaded"] for i in seen.images] == [True]
    assert seen.headline[0].startswith(f"FILES SENT {summaries[0].files_sent}")


def test_existing_files_are_sent_with_include_existing(spark, kafka, tmp_path):
    landing, metrics = _dirs(tmp_path)
    there = datagen.generate("debs2012", 120, landing / "there.csv", seed=4)
    w = Running(spark, kafka, landing, metrics, "watch-existing", "watch-existing", include_existing=True)
    w.sent(1)
    w.stop()
    assert rows(consume_all(kafka.bootstrap_servers, "watch-existing")) == expected_rows(there)


def test_an_overwritten_file_is_refused_with_a_dead_letter_and_sent_again_only_if_allowed(spark, kafka, tmp_path):
    landing, metrics = _dirs(tmp_path)
    topic, dlq = "watch-overwrite", "watch-overwrite-dlq"
    w = Running(spark, kafka, landing, metrics, topic, "watch-ow-1", dead_letter_topic=dlq)
    w.until(w.watch.started.is_set, "the first start's listing")
    path = land(landing, "orders.csv", 100, 1)
    first = expected_rows(path)
    w.sent(1)
    land(landing, "orders.csv", 140, 2)  # the same name, other rows
    w.until(lambda: str(path) in w.watch.summary.refused, "the overwrite refused")
    w.listings(2)  # refused once, not again
    w.stop()
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == first
    [event] = consume_all(kafka.bootstrap_servers, dlq)
    assert event.value["event"] == "overwritten" and event.value["file"] == str(path)
    assert "changed since it was sent" in w.watch.summary.refused[str(path)]

    again = Running(spark, kafka, landing, metrics, topic, "watch-ow-2", allow_overwrites=True)
    again.sent(1)
    again.stop()
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == first + expected_rows(path)  # both versions, once each


def test_sent_files_are_moved_and_a_binary_one_goes_to_the_error_dir_with_its_reason(spark, kafka, tmp_path):
    """And a file moved away after it was sent is forgotten but for its identity."""
    landing, metrics = _dirs(tmp_path)
    done, errors = tmp_path / "done", tmp_path / "errors"
    topic = "watch-dispose"
    w = Running(spark, kafka, landing, metrics, topic, "watch-dispose-1")  # keep: a file sent stays
    w.until(w.watch.started.is_set, "the first start's listing")
    kept = land(landing, "kept.csv", 80, 1)
    w.sent(1)
    w.stop()
    # As after a crash between the commit and the move: the next start moves it, sending nothing.
    w2 = Running(spark, kafka, landing, metrics, topic, "watch-dispose-2", after_send=f"move:{done}",
                 error_dir=str(errors))  # fmt: skip
    w2.until(lambda: (done / "kept.csv").exists(), "the sent file moved at the start")
    (tmp_path / "bin.csv.writing").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    os.replace(tmp_path / "bin.csv.writing", landing / "bin.csv")
    good = land(landing, "good.csv", 90, 2)
    good_rows = expected_rows(good)
    w2.sent(1)
    w2.until(lambda: (errors / "bin.csv").exists(), "the binary file in the error directory")
    w2.until(lambda: (done / "good.csv").exists() and not good.exists(), "good.csv moved")
    # Moved away, the watch keeps its identity alone: brought back as it was, it is not sent
    # again (moved again); a new file by the same name is a new file, sent.
    os.replace(done / "good.csv", good)
    w2.until(lambda: (done / "good.csv").exists() and not good.exists(), "good.csv, back unchanged, moved again")
    assert w2.watch.summary.files_sent == 1
    scratch = tmp_path / "good.csv.writing"
    datagen.generate("debs2012", 70, scratch, seed=3)
    new_rows = expected_rows(scratch)
    os.replace(scratch, good)
    w2.sent(2)
    w2.stop()
    assert not kept.exists() and (done / "good.csv").exists() and not good.exists()
    assert "not a text file" in (errors / "bin.csv.error.txt").read_text()
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == expected_rows(done / "kept.csv") + good_rows + new_rows
    assert w2.watch.summary.files_sent == 2 and str(good) not in w2.watch.summary.refused


def test_halt_on_error_stops_the_watch_at_a_file_that_cannot_be_sent_and_leaves_it_there(spark, kafka, tmp_path):
    from kappa_ingest.errors import InputError

    landing, metrics = _dirs(tmp_path)
    topic = "watch-halt"
    w = Running(
        spark, kafka, landing, metrics, topic, "watch-halt-1", halt_on_error=True, error_dir=str(tmp_path / "e")
    )
    w.until(w.watch.started.is_set, "the first start's listing")
    (landing / "empty.csv").write_bytes(b"")
    w.thread.join(WAIT_S)
    assert not w.thread.is_alive(), "the watch went on past a file it cannot send"
    w.resources.close()
    assert isinstance(w.error, InputError) and "empty.csv" in str(w.error) and "--halt-on-error" in str(w.error)
    assert (landing / "empty.csv").exists() and not (tmp_path / "e").exists()  # left where it was
    good = land(landing, "good.csv", 60, 1)
    (landing / "empty.csv").unlink()
    again = Running(spark, kafka, landing, metrics, topic, "watch-halt-2")  # the lock was let go
    again.sent(1)
    again.stop()
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == expected_rows(good)


def test_the_prometheus_endpoint_counts_files_and_rows(spark, kafka, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    landing, metrics = _dirs(tmp_path)
    w = Running(spark, kafka, landing, metrics, "watch-metrics", "watch-metrics", metrics_port=0)
    w.until(w.watch.started.is_set, "the first start's listing and the endpoint")
    land(landing, "m1.csv", 60, 1)
    land(landing, "m2.csv", 70, 2)
    w.sent(2)
    text = urllib.request.urlopen(w.watch.metrics_url, timeout=10).read().decode()
    w.stop()
    samples = {(s.name, s.labels.get("status", "")): s.value for f in text_string_to_metric_families(text)
               for s in f.samples}  # fmt: skip
    assert samples[("kappa_watch_files_sent_total", "")] == 2
    assert samples[("kappa_watch_rows_sent_total", "")] == 130
    assert samples[("kappa_watch_latency_seconds_count", "")] == 2
    assert samples[("kappa_watch_files_waiting", "")] == 0


def test_the_watch_command_refuses_a_second_watch_and_ends_cleanly_on_sigterm(kafka, tmp_path):
    landing, metrics = _dirs(tmp_path)
    topic = "watch-command"
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    common = ["--input", str(landing), "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
              "--metrics-dir", str(metrics), "--min-file-age", "0.3", "--master", "local[1]"]  # fmt: skip
    log = tmp_path / "watch.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([cli, "watch", *common, "--run-id", "first-watch"], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_S
        while "watching " not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        second = subprocess.run([cli, "watch", *common, "--run-id", "second-watch"], capture_output=True, text=True,
                                timeout=WAIT_S)  # fmt: skip
        assert second.returncode == 6, second.stderr[-2000:]
        assert "is locked by" in second.stderr and "first-watch" in second.stderr
        path = land(landing, "one.csv", 150, 1)
        incremental = subprocess.run([cli, "ingest", *common[:8], "--incremental", "--run-id", "cron"],
                                     capture_output=True, text=True, timeout=WAIT_S)  # fmt: skip
        assert incremental.returncode == 6 and "first-watch" in incremental.stderr, incremental.stderr[-2000:]
        while "batch first-watch-b00001: succeeded" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "watch first-watch stopped: 1 file(s), 150 rows sent" in text
    noise = ("WARNING: Using incubator modules", "Setting default log level", "To adjust logging level")
    assert not [line for line in text.splitlines() if line.startswith(noise)], text[:2000]
    assert rows(consume_all(kafka.bootstrap_servers, topic)) == expected_rows(path)
    assert Counter(r.headers["source_file"] for r in consume_all(kafka.bootstrap_servers, topic)) == {
        f"file:{path}".encode(): 150
    }


def test_objects_landing_under_a_prefix_are_sent_once_and_moved(spark, kafka, s3, tmp_path):
    """An s3:// prefix is listed (no notifications): each object put there is sent once,
    read by the tasks from the store, then moved under another prefix."""
    metrics = tmp_path / "metrics"
    prefix, done = "s3://landing/watch-in/", "s3://landing/watch-done"
    w = Running(spark, kafka, prefix, metrics, "watch-s3", "watch-s3", s3_endpoint=s3.endpoint,
                after_send=f"move:{done}")  # fmt: skip
    w.until(w.watch.started.is_set, "the first listing")
    files = [datagen.generate("debs2012", n, tmp_path / f"o{i}.csv", seed=i) for i, n in enumerate((150, 220))]
    for f in files:
        s3_put(s3, f"watch-in/{f.name}", f)
    w.sent(2)
    w.stop()
    assert rows(consume_all(kafka.bootstrap_servers, "watch-s3")) == expected_rows(files[0]) + expected_rows(files[1])
    fs = s3_filesystem(s3)
    assert sorted(i.path for i in fs.get_file_info(FileSelector("landing/watch-done/"))) == [
        "landing/watch-done/o0.csv", "landing/watch-done/o1.csv"]  # fmt: skip
    assert fs.get_file_info(FileSelector("landing/watch-in/", allow_not_found=True)) == []
