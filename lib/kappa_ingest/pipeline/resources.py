"""The things a run holds (its Kafka, the topic's lock, a Spark session it started) and
their one owner: each taken once, when the run first needs it, and all let go once, in
reverse: the lock withdrawn while Kafka is still there, then an embedded broker, beside
Spark's stop.

``ingest`` holds them for one run; a watch for every batch it runs, so that Spark, the
Python workers and the lock's lease outlive the batches.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from pyspark.sql import SparkSession

from kappa_ingest.delivery import lock
from kappa_ingest.delivery.lock import Lock
from kappa_ingest.kafka.endpoint import KafkaEndpoint, endpoint_for
from kappa_ingest.pipeline.kept import Kept
from kappa_ingest.report.recording import Recorder
from kappa_ingest.spark.session import build_session, stop_session


class RunResources:
    """A run's (or a watch's) Kafka, lock and Spark, given or taken here; a context manager
    that lets go of what it took. ``spark`` given: the caller's session, never stopped here."""

    def __init__(self, cfg: Any, spark: SparkSession | None = None) -> None:
        self.cfg = cfg
        self.spark = spark
        self.kafka: KafkaEndpoint | None = None
        self.held: Lock | None = None
        self._owns_spark = False
        self._stopped = threading.Event()
        # Set by a watch that keeps its Python workers warm: its batches skip the warm-up job.
        self.workers_warm = False
        # A watch's: its batches' reports recorded on a thread of their own (None: at once).
        self.recorder: Recorder | None = None
        self._kept: Kept | None = None

    def open_kafka(self, master: str | None = None) -> KafkaEndpoint:
        """The run's Kafka; an embedded broker starts (in the background) the first time."""
        if self.kafka is None:
            master = master or (self.spark.sparkContext.master if self.spark else self.cfg.spark_master) or "local[*]"
            self.kafka = endpoint_for(self.cfg.bootstrap_servers, master, self.cfg.dry_run)
        return self.kafka

    def servers(self) -> str:
        """The bootstrap servers (waiting for an embedded broker still starting)."""
        return self.open_kafka().servers()

    def kept(self) -> Kept:
        """The driver's Kafka connection, and the answers a next run (a watch's batch) need not ask again."""
        if self._kept is None:
            self._kept = Kept(self.servers())
        return self._kept

    def forget(self) -> None:
        """After a failed run: the next one asks Kafka everything afresh."""
        if self._kept is not None:
            self._kept.forget()

    def hold(self) -> Lock | None:
        """The topic's lock, taken the first time (exit 6 if another run holds it); a dry run takes none."""
        if self.held is None and not self.cfg.dry_run:
            self.held = lock.hold(self.cfg, self.servers())
        return self.held

    def start_spark(self, app_name: str, extra_conf: dict[str, str], quick_jit: bool) -> SparkSession:
        """A session of the run's own, stopped by :meth:`close`."""
        assert self.spark is None, "the run has its session"
        self.spark = build_session(app_name, self.cfg.spark_master, extra_conf, quick_jit=quick_jit)
        self._owns_spark = True
        return self.spark

    def release_lock(self) -> None:
        if self.held is not None:
            self.held.release()

    def close(self) -> None:
        """Let go of everything, once: on a thread, the lock withdrawn (while Kafka is still
        there), then the driver's Kafka clients and the run's own broker; meanwhile Spark's
        session stopped here, if it is the run's. (A run calls it as soon as it needs none of
        them, so that nobody waits for them after its report.)"""
        if self._stopped.is_set():
            return
        self._stopped.set()
        kafka_side = threading.Thread(target=self._let_go_of_kafka, name="stop-kafka")
        kafka_side.start()
        try:
            if self._owns_spark and self.spark is not None:
                stop_session(self.spark)
        finally:
            kafka_side.join()

    def _let_go_of_kafka(self) -> None:
        try:
            self.release_lock()  # best effort: a run that cannot is found dead by the next one
        except Exception as e:  # noqa: BLE001 - the broker stops all the same
            print(f"kappa-ingest: warning: withdrawing the topic's lock: {e}"[:300], file=sys.stderr)
        try:
            if self._kept is not None:  # while its broker is still there
                self._kept.close()
        except Exception as e:  # noqa: BLE001 - the broker stops all the same
            print(f"kappa-ingest: warning: closing the driver's Kafka clients: {e}"[:300], file=sys.stderr)
        kafka, self.kafka = self.kafka, None
        if kafka is not None:
            kafka.close()

    def __enter__(self) -> RunResources:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
