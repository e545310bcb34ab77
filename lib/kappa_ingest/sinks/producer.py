"""What a partition's producer offers the writers, whichever client is behind it, and the
errors it raises (their names are matched on the driver: ``failures.classify``)."""

from __future__ import annotations

from typing import Protocol

from kappa_ingest.source.records import Encoded


class DeliveryFailed(RuntimeError):
    """Raised in a task whose producer could not deliver every record."""


def refusal_hint(first_error: object) -> str:
    """What to do about records not acknowledged, where their first error says: the end
    of the failure's line (empty where nothing more is known)."""
    text = str(first_error).lower()
    if "timed out" in text:
        return ": no broker acknowledged them within delivery.timeout.ms; check that the brokers run and are reachable"
    # Kept short: the driver's line keeps 300 characters of a task's error.
    times = ("record times beyond the topic's message.timestamp.before.max.ms or after.max.ms"
             " (--event-time-column gives event times)")  # fmt: skip
    if "invalid timestamp" in text or "invalidtimestamp" in text:
        return f": {times}: raise those limits"
    # Kafka 4 refuses times out of bounds so too; librdkafka fails a batch's other records
    # with "an invalid record in the same batch".
    if "failed to validate record" in text or "invalid record" in text or "invalidrecord" in text:
        return f": {times}, or null keys in a compacted topic?"
    return ""


class Fenced(DeliveryFailed):
    """Another producer initialised this producer's transactional id: it may write nothing
    more (its open transaction was aborted by the newer one)."""


class RunSuperseded(RuntimeError):
    """The ledger says another run took this run over: its tasks stop."""


class TransactionFailed(DeliveryFailed):
    """A transactional call failed, classified as librdkafka classifies it: ``retriable``
    (call it again), ``abortable`` (abort, then start over), ``fatal`` (the producer is
    unusable: a new one is needed), ``fenced`` (a newer producer of the id exists)."""

    def __init__(
        self,
        what: str,
        reason: str,
        *,
        fatal: bool = False,
        abortable: bool = False,
        retriable: bool = False,
        fenced: bool = False,
    ) -> None:
        self.what, self.reason = what, reason
        self.fatal, self.abortable, self.retriable, self.fenced = fatal, abortable, retriable, fenced
        message = f"Kafka transaction failed while {what}: {reason}"
        if fenced:
            message += "; another writer of the same units took its transactional.id over"
        super().__init__(message)


class PartitionProducer(Protocol):
    def send(self, enc: Encoded, run_id: str) -> None:
        """Send every record of ``enc``, with the headers ``run_id`` and ``source_file``."""

    def send_ledger(self, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        """Send ledger records (key, value) to ``topic``."""

    def send_dead_letters(self, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
        """Send dead letters (value, headers) to ``topic``."""

    def flush(self) -> None:
        """Wait for every record; raise DeliveryFailed (Fenced) unless every one was acknowledged."""

    def init_transactions(self, timeout_s: float) -> None: ...
    def begin(self) -> None: ...
    def commit(self, timeout_s: float) -> None: ...
    def abort(self, timeout_s: float) -> None: ...

    @property
    def partitions_touched(self) -> int | None:
        """Data-topic partitions written by the current transaction (each gets a commit marker); None: unknown."""

    def offset_runs(self) -> list[tuple[int, int, int]] | None:
        """Where the current transaction's data records landed (without transactions: all the
        producer's since it was made): ``(partition, first offset, count)`` runs of
        consecutive offsets, once flushed; None: unknown."""

    def close(self) -> None:
        """Release the producer, dropping what it still holds; never raises."""


class Discard:
    """The dry run's producer: converts everything, sends nothing."""

    partitions_touched = 0

    def offset_runs(self) -> list[tuple[int, int, int]] | None:
        return None

    def send(self, enc: Encoded, run_id: str) -> None:
        pass

    def send_ledger(self, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        pass

    def send_dead_letters(self, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
        pass

    def flush(self) -> None:
        pass

    def init_transactions(self, timeout_s: float) -> None:
        pass

    def begin(self) -> None:
        pass

    def commit(self, timeout_s: float) -> None:
        pass

    def abort(self, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass


def headers_by_file(enc: Encoded, run_id: str) -> tuple[list[list[tuple[str, bytes]]], list[int]]:
    """The records' headers, made once per distinct source file in the batch."""
    encoded = enc.source_files.dictionary_encode()
    rid = run_id.encode()
    headers = [[("run_id", rid), ("source_file", f.encode())] for f in encoded.dictionary.to_pylist()]
    return headers, encoded.indices.to_pylist()
