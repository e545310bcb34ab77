"""What the driver keeps of Kafka from one run to the next in the same process (a watch's
batches): its admin connection, warm, and the set-up's answers a next batch need not ask
again, so that a batch's own round trips on a long link are few.

Kept: the topics made and checked (the data topic, the ledger, a dead-letter topic, each
writable), their record and batch limits, the brokers' settings, the transaction
coordinator warmed, and the topic's producers as the last run's reconciliation saw them
(a next run's "before", read before its offsets as a "before" must be: a writer in between
then counts as another writer, and the run is verified by reading back; never the other
way round). Asked again by every run: the topic's offsets and its shape (side by side, one
round trip). A failed run forgets everything: the next asks afresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kappa_ingest.delivery import guarantees
from kappa_ingest.kafka.topics import Admin, Producers, producers, python_admin
from kappa_ingest.source.record_size import Limit

T = TypeVar("T")
PRODUCERS_TIMEOUT_S = 5.0  # the producers' question, each time it is asked
CONNECT_AHEAD_S = 3.0  # a client connected ahead of its question (as a failed run's offsets are asked)


@dataclass(frozen=True)
class Topics:
    """What setting up the topics found of them (the report's ``broker`` section says it)."""

    partitions: int  # the data topic's
    replication: int
    max_record_bytes: int  # a record's largest size, within the topic's and the producer's limits
    batch_bytes: int  # the producers' batch.size, within the topics' limits
    created: bool = False  # made by this run (not kept for the next: it finds the topic there)
    note: str | None = None  # how an existing topic differs from what was asked


@dataclass(frozen=True)
class Setup:
    """What setting up the topics found, kept for the next run of the process."""

    key: tuple  # what it was found for: the topics and the producer's settings
    limit: Limit  # a record's largest size
    settings: dict[str, str]  # the producer's, its batches within the topics' limits
    topics: Topics  # as a next run finds them (not created by it)


class Kept:
    """Kafka's answers kept by a run's resources; see the module."""

    def __init__(self, servers: str) -> None:
        self.servers = servers
        self._admin: Admin | None = None
        self._settings: dict[str, str] | None = None  # the admin's (a secret read again may differ)
        self.setup: Setup | None = None
        self.coordinator_warm = False
        self._coordinator: threading.Thread | None = None  # warming it (begun beside Spark's start, or by the set-up)
        self._producers_seen: tuple[str, int, Producers] | None = None  # topic, partitions, their producers
        self._python: dict[str, tuple[dict[str, Any], Any]] = {}  # kafka-python admin clients, by what they ask

    def admin(self, settings: dict[str, str]) -> Admin:
        """The kept admin connection, made again if the run's settings differ (a credential read anew)."""
        if self._admin is not None and self._settings != settings:
            self.close()
        if self._admin is None:
            self._admin, self._settings = Admin(self.servers, settings), settings
        return self._admin

    def warm_coordinator(self, conf: dict[str, Any], scope: str) -> threading.Thread | None:
        """The transaction coordinator being warmed (:func:`~kappa_ingest.delivery.guarantees.warm_coordinator`),
        begun now unless it was before; None once it is warm."""
        if self.coordinator_warm:
            return None
        if self._coordinator is None:
            self._coordinator = guarantees.warm_coordinator(conf, scope)
        return self._coordinator

    def setup_for(self, key: tuple) -> Setup | None:
        return self.setup if self.setup is not None and self.setup.key == key else None

    def keep_producers(self, topic: str, partitions: int, found: Producers) -> None:
        self._producers_seen = (topic, partitions, found)

    def take_producers(self, topic: str, partitions: int) -> Producers | None:
        """The topic's producers as the last run saw them at its end (once; None: not seen)."""
        seen, self._producers_seen = self._producers_seen, None
        return seen[2] if seen is not None and seen[:2] == (topic, partitions) else None

    def producers(self, admin_conf: dict[str, Any], topic: str, partitions: int) -> Producers | None:
        """The topic's producers now (:func:`~kappa_ingest.kafka.topics.producers`), through a
        kept client; None if the brokers did not say, asked twice (a second client, made
        afresh: a busy machine's first one once missed its 5 s, a just-made topic's leaders
        may have moved)."""
        for _ in range(2):
            try:
                found = self.ask("producers", admin_conf, PRODUCERS_TIMEOUT_S,
                                 lambda c: producers(admin_conf, topic, partitions, client=c))  # fmt: skip
            except Exception:  # noqa: BLE001 - not seen: asked again, else the run is read back
                continue
            if found is not None:
                return found
        return None

    def connect(self, name: str, admin_conf: dict[str, Any], timeout_s: float) -> None:
        """Make the client kept as ``name`` now (its connection's round trips while the
        caller does something else), if it is not made yet; a failure is the question's to
        meet again. Connecting is bounded by CONNECT_AHEAD_S, so that a run whose brokers
        went away is not held up by it. Not beside another call on ``name``."""
        conf, client = self._python.get(name, (None, None))
        if client is not None and conf == admin_conf:
            return
        self._drop(name)
        try:
            self._python[name] = (admin_conf, python_admin(admin_conf, timeout_s, CONNECT_AHEAD_S))
        except Exception:  # noqa: BLE001 - asked again when the question comes
            pass

    def ask(self, name: str, admin_conf: dict[str, Any], timeout_s: float, question: Callable[[Any], T]) -> T:
        """``question(client)`` through the kafka-python admin client kept as ``name`` (made
        the first time, and again for other settings); one whose question failed, or found
        nothing, is dropped (the next is made afresh). A client made before this question
        (connected while the run sent, or for a watch's last batch) that fails it is asked
        again through a new one: it may know a broker that has died since. One thread at a
        time per name."""
        conf, client = self._python.get(name, (None, None))
        made_before = client is not None and conf == admin_conf
        try:
            return self._ask(name, admin_conf, timeout_s, question)
        except Exception:
            if not made_before:
                raise
        return self._ask(name, admin_conf, timeout_s, question)  # (the failed one was dropped)

    def _ask(self, name: str, admin_conf: dict[str, Any], timeout_s: float, question: Callable[[Any], T]) -> T:
        try:
            conf, client = self._python.get(name, (None, None))
            if client is None or conf != admin_conf:
                self._drop(name)
                client = python_admin(admin_conf, timeout_s)
                self._python[name] = (admin_conf, client)
            answer = question(client)
        except BaseException:
            self._drop(name)
            raise
        if answer is None:
            self._drop(name)
        return answer

    def _drop(self, name: str) -> None:
        _, client = self._python.pop(name, (None, None))
        if client is not None:
            client.close()

    def forget(self) -> None:
        """After a failed run: nothing it knew is trusted, its connections not reused."""
        self.setup, self.coordinator_warm, self._coordinator, self._producers_seen = None, False, None, None
        self.close()

    def close(self) -> None:
        try:
            for name in list(self._python):
                self._drop(name)
        finally:
            if self._admin is not None:
                admin, self._admin = self._admin, None
                admin.close()
