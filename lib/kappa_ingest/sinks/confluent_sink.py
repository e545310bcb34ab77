"""The ``confluent`` sink: one confluent-kafka (librdkafka) Producer per partition.

Delivery reports are asked for failures only (``delivery.report.only.error``): a
successful report per record would cost a Python call per row. The count stays exact,
because librdkafka reports every record that fails and ``flush()`` returning 0 means no
record is still in flight; so acknowledged = produced - failed.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from kappa_ingest.records import Encoded
from kappa_ingest.sinks.partition_runner import DeliveryFailed

FLUSH_TIMEOUT_S = 120.0
FATAL_CODES = {
    KafkaError._AUTHENTICATION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
}


class ConfluentPartitionProducer:
    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self.produced = 0
        self.failed = 0
        self.first_error: object | None = None
        self.fatal: object | None = None
        self.producer = Producer(
            {
                **conf,
                "log_level": 3,
                "delivery.report.only.error": True,
                "on_delivery": self._on_delivery,
                "error_cb": self._on_error,
            }
        )

    def _on_delivery(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.failed += 1
            self.first_error = self.first_error or err

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal() or err.code() in FATAL_CODES:
            self.fatal = self.fatal or err

    def send(self, enc: Encoded, headers: list[list[tuple[str, bytes]]], header_index: list[int]) -> None:
        produce, poll, topic = self.producer.produce, self.producer.poll, self.topic
        values = enc.values.to_pylist()
        keys = enc.keys.to_pylist() if enc.keys is not None else [None] * len(values)
        stamps = enc.timestamps_ms.to_pylist()
        for value, key, ts, h in zip(values, keys, stamps, header_index, strict=False):
            while True:
                try:
                    produce(topic, value, key, timestamp=ts, headers=headers[h])
                    break
                except BufferError:
                    # The local queue is full: serve delivery reports until it drains.
                    poll(0.05)
                    self._raise_if_fatal()
                except KafkaException as e:  # refused before sending, e.g. a record too large
                    raise DeliveryFailed(f"Kafka client refused a record: {e.args[0].str()}") from e
        self.produced += len(values)
        poll(0)
        self._raise_if_fatal()

    def _raise_if_fatal(self) -> None:
        if self.fatal is not None:
            raise DeliveryFailed(f"Kafka refused the producer: {self.fatal}")

    def close(self) -> None:
        remaining = self.producer.flush(FLUSH_TIMEOUT_S)
        self._raise_if_fatal()
        if remaining or self.failed:
            raise DeliveryFailed(
                f"{self.failed + remaining} of {self.produced} records not acknowledged by Kafka"
                f" ({remaining} still in flight after {FLUSH_TIMEOUT_S:.0f} s); first error: {self.first_error}"
            )
