"""A watch's numbers for Prometheus (``--metrics-port``): files and rows sent, what waits
and for how long, landing-to-commit latency, errors by reason.

Served on 127.0.0.1 unless told otherwise (a scrape from elsewhere is an explicit choice:
the page names files). Each watch has its own registry, so that two watches in one
process (the tests) never share a counter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Landing to commit, in seconds: a few seconds is the aim, a listing period (s3://) or a
# backlog stretches it.
LATENCY_BUCKETS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


@dataclass
class WatchMetrics:
    watch_id: str
    registry: Any = field(init=False)

    def __post_init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = registry = CollectorRegistry()
        labels = {"watch": self.watch_id}
        self.files_sent = Counter("kappa_watch_files_sent", "Files whose every row is committed to the topic",
                                  ["watch"], registry=registry).labels(**labels)  # fmt: skip
        self.rows_sent = Counter("kappa_watch_rows_sent", "Rows committed to the topic", ["watch"],
                                 registry=registry).labels(**labels)  # fmt: skip
        self.batches = Counter("kappa_watch_batches", "Batches run, by how they ended", ["watch", "status"],
                               registry=registry)  # fmt: skip
        self.errors = Counter("kappa_watch_errors", "Files not sent, by reason", ["watch", "reason"], registry=registry)
        self.files_waiting = Gauge("kappa_watch_files_waiting", "Files seen and not yet sent", ["watch"],
                                   registry=registry).labels(**labels)  # fmt: skip
        self.bytes_waiting = Gauge("kappa_watch_bytes_waiting", "Bytes of the files waiting", ["watch"],
                                   registry=registry).labels(**labels)  # fmt: skip
        self.oldest_waiting = Gauge("kappa_watch_oldest_waiting_seconds", "Age of the oldest file waiting",
                                    ["watch"], registry=registry).labels(**labels)  # fmt: skip
        self.latency = Histogram("kappa_watch_latency_seconds", "From a file's landing to its last commit",
                                 ["watch"], buckets=LATENCY_BUCKETS, registry=registry).labels(**labels)  # fmt: skip

    def batch_ended(self, status: str) -> None:
        self.batches.labels(watch=self.watch_id, status=status).inc()

    def file_failed(self, reason: str) -> None:
        self.errors.labels(watch=self.watch_id, reason=reason).inc()

    def file_sent(self, rows: int, latency_s: float) -> None:
        self.files_sent.inc()
        self.rows_sent.inc(rows)
        self.latency.observe(latency_s)

    def backlog(self, files: int, bytes_: int, oldest_s: float) -> None:
        self.files_waiting.set(files)
        self.bytes_waiting.set(bytes_)
        self.oldest_waiting.set(oldest_s)

    def serve(self, port: int, host: str = "127.0.0.1") -> tuple[Any, Any]:
        """Start serving ``/metrics``; (server, thread): ``server.shutdown()`` stops it."""
        from prometheus_client import start_http_server

        return start_http_server(port, addr=host, registry=self.registry)
