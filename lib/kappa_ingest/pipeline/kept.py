"""What the driver keeps of Kafka from one run to the next in the same process (a watch's
batches): its admin connection, warm, and the set-up's answers a next batch need not ask
again, so that a batch's own round trips on a long link are few.

Kept: the topics made and checked (the data topic, the ledger, a dead-letter topic, each
writable), their record and batch limits, the brokers' settings, the transaction
coordinator warmed, and the topic's producers as the last run's reconciliation saw them
(a next run's "before": a writer in between then counts as another writer, and the run
is verified by reading back; never the other way round). Asked again by every run: the
topic's offsets and its shape (side by side, one round trip). A failed run forgets
everything: the next asks afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kappa_ingest.kafka.topics import Admin, Producers, python_admin
from kappa_ingest.source.record_size import Limit

T = TypeVar("T")


@dataclass(frozen=True)
class Setup:
    """What setting up the topics found."""

    key: tuple  # what it was found for: the topics and the producer's settings
    limit: Limit  # a record's largest size
    settings: dict[str, str]  # the producer's, its batches within the topics' limits
    broker: dict[str, Any]  # what the report says of the topics
    partitions: int
    replication: int


class Kept:
    """Kafka's answers kept by a run's resources; see the module."""

    def __init__(self, servers: str, settings: dict[str, str]) -> None:
        self.servers, self.settings = servers, settings
        self._admin: Admin | None = None
        self.setup: Setup | None = None
        self.coordinator_warm = False
        self.producers_seen: Producers | None = None
        self._python: dict[str, Any] = {}  # kafka-python admin clients, by what they are asked

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.servers, self.settings)
        return self._admin

    def setup_for(self, key: tuple) -> Setup | None:
        return self.setup if self.setup is not None and self.setup.key == key else None

    def ask(self, name: str, admin_conf: dict[str, Any], timeout_s: float, question: Callable[[Any], T]) -> T:
        """``question(client)`` through the kafka-python admin client kept as ``name`` (made
        the first time, on the caller's thread); one whose question failed, or found
        nothing, is dropped (the next is made afresh)."""
        try:
            client = self._python.get(name)
            if client is None:
                client = self._python[name] = python_admin(admin_conf, timeout_s)
            answer = question(client)
        except BaseException:
            self._drop(name)
            raise
        if answer is None:
            self._drop(name)
        return answer

    def _drop(self, name: str) -> None:
        client = self._python.pop(name, None)
        if client is not None:
            client.close()

    def forget(self) -> None:
        """After a failed run: nothing it knew is trusted, its connections not reused."""
        self.setup, self.coordinator_warm, self.producers_seen = None, False, None
        self.close()

    def close(self) -> None:
        for name in list(self._python):
            self._drop(name)
        if self._admin is not None:
            admin, self._admin = self._admin, None
            admin.close()
