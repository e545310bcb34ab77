"""A contestant's sending window as the broker saw it: the topic's end offsets read every
50 ms while it runs, so that every contestant (Kafka's own producer and kappa-ingest alike)
is timed by the same clock, not each by its own report."""

from __future__ import annotations

import threading
import time

from kappa_ingest.errors import KafkaUnavailable
from kappa_ingest.kafka.topics import Admin

READ_EVERY_S = 0.05


class BrokerClock:
    """Reads ``topic``'s summed end offsets (wall-clock time, total) until stopped."""

    def __init__(self, admin: Admin, topic: str, partitions: int) -> None:
        self.admin, self.topic, self.partitions = admin, topic, partitions
        self.readings: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-clock", daemon=True)

    def start(self) -> BrokerClock:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                total = sum(self.admin.end_offsets(self.topic, 2.0, self.partitions).values())
            except KafkaUnavailable:
                total = None
            if total is not None:
                self.readings.append((time.time(), total))
            self._stop.wait(READ_EVERY_S)

    def window(self, before: int, final: int) -> tuple[float, float] | None:
        """From the last reading at ``before`` (before the first record) to the first at
        ``final`` (every record in); None if the readings do not show both."""
        return sending_window(self.readings, before, final)


def sending_window(readings: list[tuple[float, int]], before: int, final: int) -> tuple[float, float] | None:
    start = next((i for i, (_, n) in enumerate(readings) if n > before), None)
    end = next((t for t, n in readings if n >= final), None)
    if start is None or start == 0 or end is None or final <= before:
        return None
    return readings[start - 1][0], end
