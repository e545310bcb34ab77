"""The ``kafka-python`` sink: one pure-Python KafkaProducer per partition.

``send()`` returns a future; failures surface only through it, so every future gets an
errback that counts and keeps the first error. ``flush()`` waits for all of them.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from kappa_ingest.records import Encoded
from kappa_ingest.sinks.partition_runner import DeliveryFailed, headers_by_file

FLUSH_TIMEOUT_S = 120.0


class KafkaPythonPartitionProducer:
    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self.produced = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.producer = KafkaProducer(**conf)

    def _on_error(self, exc: BaseException) -> None:
        self.failed += 1
        self.first_error = self.first_error or exc

    def send(self, enc: Encoded, run_id: str) -> None:
        send, topic, on_error = self.producer.send, self.topic, self._on_error
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

    def close(self) -> None:
        try:
            self.producer.flush(timeout=FLUSH_TIMEOUT_S)
        except Exception as e:  # kafka-python raises its own errors from flush
            raise DeliveryFailed(
                f"records of {self.produced} not acknowledged by Kafka: flush failed ({e!r});"
                f" first error: {self.first_error!r}"
            ) from e
        finally:
            try:
                self.producer.close(timeout=10)
            except Exception:  # noqa: BLE001 - what was delivered is decided above; close must not mask it
                pass
        if self.failed:
            raise DeliveryFailed(
                f"{self.failed} of {self.produced} records not acknowledged by Kafka; first error: {self.first_error!r}"
            )
