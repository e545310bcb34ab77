"""Which Kafka a run talks to: the configured cluster; else a broker left running by
``kappa-ingest kafka start``; else an embedded broker started for this run alone.

The embedded broker starts on a background thread as soon as the run knows it needs one,
so its two JVMs (storage format, then the broker) start while Spark's does; ``servers()``
waits for it only when the run first talks to Kafka.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

from kappa_ingest.errors import UsageError
from kappa_ingest.kafka import broker as local_kafka

LOCAL_KAFKA_DIR = ".kafka"  # where `kappa-ingest kafka start` keeps a long-lived local broker
# A run's own broker holds nothing anyone reads after the run: it gets this long to stop cleanly.
EMBEDDED_STOP_S = 3.0


class KafkaEndpoint:
    """The bootstrap servers of one run, and the embedded broker behind them, if any."""

    def __init__(self, servers: str | None = None, embedded: bool = False) -> None:
        self._servers = servers
        self.embedded = embedded
        self._cluster: local_kafka.LocalKafka | None = None
        self._state: str | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def starting_embedded(cls) -> KafkaEndpoint:
        """An endpoint whose broker is being started on a background thread."""
        endpoint = cls(embedded=True)
        endpoint._state = tempfile.mkdtemp(prefix="kappa-kafka-")
        endpoint._thread = threading.Thread(target=endpoint._start, name="embedded-kafka", daemon=True)
        endpoint._thread.start()
        return endpoint

    def _start(self) -> None:
        try:
            self._cluster = local_kafka.start(self._state)  # type: ignore[arg-type]
            self._servers = self._cluster.bootstrap_servers
        except BaseException as e:  # noqa: BLE001 - re-raised by servers() on the run's thread
            self._error = e

    def servers(self) -> str:
        """The bootstrap servers; waits for an embedded broker still starting (raising its error)."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        if self._servers is None:
            raise UsageError("no Kafka configured for this run")
        return self._servers

    def close(self) -> None:
        """Stop the embedded broker (if this run started one) and remove its state. Idempotent."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._cluster is not None:
            self._cluster.stop(timeout_s=EMBEDDED_STOP_S)
            self._cluster = None
        if self._state is not None:
            shutil.rmtree(self._state, ignore_errors=True)
            self._state = None

    def __enter__(self) -> KafkaEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def endpoint_for(bootstrap_servers: str | None, master: str, dry_run: bool = False) -> KafkaEndpoint:
    """The run's Kafka, started now if the run needs its own broker."""
    if bootstrap_servers:
        return KafkaEndpoint(bootstrap_servers)
    if dry_run:
        return KafkaEndpoint()  # sends nothing: no Kafka to ask
    if not master.startswith("local"):
        raise UsageError(
            "no --bootstrap-servers: give the Kafka cluster (the embedded broker runs only with a local master)"
        )
    running = local_kafka.status(Path(LOCAL_KAFKA_DIR))
    if running is not None:
        return KafkaEndpoint(running.bootstrap_servers)
    return KafkaEndpoint.starting_embedded()
