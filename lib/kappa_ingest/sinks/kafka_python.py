"""The ``kafka-python`` sink: one pure-Python KafkaProducer per partition.

``send()`` returns a future; failures surface only through it, so every future gets an
errback that counts and keeps the first error. ``flush()`` waits for all of them.
Transactions (exactly-once delivery) are kafka-python's own (KIP-98, since 2.1).
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from kappa_ingest.delivery.ledger import ENTRY, kind_headers
from kappa_ingest.sinks.producer import DeliveryFailed, Fenced, TransactionFailed, headers_by_file, refusal_hint
from kappa_ingest.source.records import Encoded

FLUSH_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 10.0
ENTRY_HEADERS = kind_headers(ENTRY)  # the ledger entries' kind header
_FENCED = ("ProducerFencedError", "InvalidProducerEpochError", "TransactionCoordinatorFencedError")


class KafkaPythonPartitionProducer:
    def __init__(self, conf: dict[str, Any], topic: str, transactional_id: str | None = None) -> None:
        self.topic = topic
        self.produced = 0  # records queued, ledger entries and dead letters among them, as failures count them
        self.failed = 0
        self.first_error: BaseException | None = None
        self._pending: tuple[str, Any] | None = None  # a transactional call that timed out, still under way
        if transactional_id is not None:
            conf = {**conf, "transactional_id": transactional_id}
        try:
            self.producer: KafkaProducer | None = KafkaProducer(**conf)
        except KafkaError as e:  # it bootstraps here: Kafka down for the bootstrap timeout
            raise DeliveryFailed(f"Kafka client could not start: {e}") from e

    def _on_error(self, exc: BaseException) -> None:
        self.failed += 1
        self.first_error = self.first_error or exc

    def _live(self) -> KafkaProducer:
        assert self.producer is not None, "the producer is closed"
        return self.producer

    def send(self, enc: Encoded, run_id: str) -> None:
        send, topic, on_error = self._live().send, self.topic, self._on_error
        headers, header_index = headers_by_file(enc, run_id)
        values = enc.values.to_pylist()
        keys = enc.keys.to_pylist() if enc.keys is not None else [None] * len(values)
        stamps = enc.timestamps_ms.to_pylist()
        try:
            for value, key, ts, h in zip(values, keys, stamps, header_index, strict=True):
                send(topic, value=value, key=key, timestamp_ms=ts, headers=headers[h]).add_errback(on_error)
        except KafkaError as e:  # refused before sending, e.g. a record too large
            raise DeliveryFailed(f"Kafka client refused a record: {e!r}") from e
        self.produced += len(values)

    def send_ledger(self, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        try:
            for key, value in records:
                self._live().send(topic, value=value, key=key, headers=ENTRY_HEADERS).add_errback(self._on_error)
                self.produced += 1
        except KafkaError as e:
            # The entry goes out behind the unit's records, still in flight: a transaction
            # that one of them failed (or that a newer producer fenced) refuses it. That failure
            # is the one to report, Fenced among them.
            self.flush()
            raise DeliveryFailed(f"Kafka client refused a ledger record: {e!r}") from e

    def send_dead_letters(self, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
        try:
            for value, headers in records:
                self._live().send(topic, value=value, headers=headers).add_errback(self._on_error)
                self.produced += 1
        except KafkaError as e:
            raise DeliveryFailed(f"Kafka client refused a dead letter: {e!r}") from e

    def flush(self) -> None:
        try:
            self._live().flush(timeout=FLUSH_TIMEOUT_S)
        except Exception as e:  # kafka-python raises its own errors from flush
            raise DeliveryFailed(
                f"records of {self.produced} not acknowledged by Kafka: flush failed ({e!r});"
                f" first error: {self.first_error!r}"
            ) from e
        if self.failed:
            fenced = type(self.first_error).__name__ in _FENCED
            raise (Fenced if fenced else DeliveryFailed)(
                f"{self.failed} of {self.produced} records not acknowledged by Kafka{refusal_hint(self.first_error)};"
                f" first error: {self.first_error!r}"  # last: the broker's own text can be long
            )

    def _txn_error(self, what: str, e: BaseException) -> TransactionFailed:
        """The error as librdkafka's rules see it, from kafka-python's transaction manager:
        fatal (the producer is done), abortable (abort, then start over), retriable (the
        coordinator did not answer in time, or said to retry)."""
        name = type(e).__name__
        manager = getattr(self.producer, "_transaction_manager", None)
        fatal = name in _FENCED or bool(manager is not None and manager.has_fatal_error())
        abortable = not fatal and bool(manager is not None and manager.has_abortable_error())
        retriable = (
            not fatal and not abortable and (isinstance(e, TimeoutError) or bool(getattr(e, "retriable", False)))
        )
        return TransactionFailed(what, f"{name}: {e}", fatal=fatal, abortable=abortable, retriable=retriable,
                                 fenced=name in _FENCED)  # fmt: skip

    def _wait(self, what: str, start: Any, timeout_s: float) -> None:
        """Start a transactional call (``start()`` gives its result) and wait for it within
        ``timeout_s``. KafkaProducer's own calls wait max_block_ms, or without a bound. A call
        that timed out is waited for again by the next one (as Java's producer resumes it):
        kafka-python refuses to start it twice."""
        producer = self._live()
        try:
            if self._pending is None or self._pending[0] != what:
                self._pending = (what, start())
                producer._sender.wakeup()
            if not self._pending[1].wait(timeout_ms=int(timeout_s * 1000)):  # raises the coordinator's own error
                raise TimeoutError(f"no answer from the transaction coordinator in {timeout_s:.0f} s")
            self._pending = None
        except Exception as e:
            if not isinstance(e, TimeoutError):
                self._pending = None
            raise self._txn_error(what, e) from e

    def init_transactions(self, timeout_s: float) -> None:
        self._wait("initialising the transaction", self._live()._transaction_manager.initialize_transactions, timeout_s)

    def begin(self) -> None:
        try:
            self._live().begin_transaction()
        except Exception as e:
            raise self._txn_error("beginning the transaction", e) from e

    def commit(self, timeout_s: float) -> None:
        self._wait("committing the transaction", self._live()._transaction_manager.begin_commit, timeout_s)

    def abort(self, timeout_s: float) -> None:
        self._wait("aborting the transaction", self._live()._transaction_manager.begin_abort, timeout_s)

    @property
    def partitions_touched(self) -> int | None:
        """The data topic's partitions the transaction added (each gets a commit marker),
        after a flush. kafka-python keeps them in its transaction manager, not in its API:
        read defensively (None, and a read-back instead, if that ever moves)."""
        manager = getattr(self.producer, "_transaction_manager", None)
        added = getattr(manager, "_partitions_in_transaction", None)
        if not isinstance(added, set):
            return None
        return sum(1 for tp in added if getattr(tp, "topic", None) == self.topic)

    def offset_runs(self) -> list[tuple[int, int, int]] | None:
        return None  # its futures hold the offsets, but a callback per record costs a Python call each

    def close(self) -> None:
        """Let the producer go; what was delivered was decided by flush() or the transaction."""
        if self.producer is not None:
            producer, self.producer = self.producer, None
            try:
                producer.close(timeout=CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - closing must not mask the task's outcome
                pass
