"""A watch's Prometheus endpoint, scraped over HTTP and read with prometheus_client's own
parser, as a Prometheus server would."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from kappa_ingest.kafka.broker import free_port
from kappa_ingest.watch.exposition import WatchMetrics


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip


def test_a_scrape_reads_what_the_watch_counted():
    metrics = WatchMetrics("w1")
    metrics.file_sent(rows=10_000, latency_s=1.2)
    metrics.file_sent(rows=500, latency_s=0.4)
    metrics.file_failed("binary")
    metrics.batch_ended("succeeded")
    metrics.backlog(files=3, bytes_=3_000, oldest_s=7.5)
    port = free_port()
    server, thread = metrics.serve(port)
    try:
        got = _scrape(port)
    finally:
        server.shutdown()
        thread.join(10)
    w = (("watch", "w1"),)
    assert got[("kappa_watch_files_sent_total", w)] == 2 and got[("kappa_watch_rows_sent_total", w)] == 10_500
    assert got[("kappa_watch_errors_total", (("reason", "binary"), ("watch", "w1")))] == 1
    assert got[("kappa_watch_batches_total", (("status", "succeeded"), ("watch", "w1")))] == 1
    assert got[("kappa_watch_files_waiting", w)] == 3 and got[("kappa_watch_oldest_waiting_seconds", w)] == 7.5
    assert got[("kappa_watch_latency_seconds_count", w)] == 2
    assert got[("kappa_watch_latency_seconds_bucket", (("le", "0.5"), ("watch", "w1")))] == 1
    assert got[("kappa_watch_latency_seconds_bucket", (("le", "1.5"), ("watch", "w1")))] == 2


def test_two_watches_in_one_process_count_apart():
    a, b = WatchMetrics("a"), WatchMetrics("b")
    a.file_sent(rows=1, latency_s=0.1)
    assert a.registry.get_sample_value("kappa_watch_files_sent_total", {"watch": "a"}) == 1
    assert b.registry.get_sample_value("kappa_watch_files_sent_total", {"watch": "b"}) == 0
