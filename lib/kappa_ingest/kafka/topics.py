"""Driver-side Kafka administration: reachability, topic creation, end offsets, broker settings.

Always confluent-kafka's AdminClient, whichever sink produces: it fails fast (an
unreachable or refusing cluster is an exit-4 error within ~15 s, never a hang). End
offsets are high watermarks (``read_uncommitted``: records appended, committed or not);
librdkafka's own default would give the last stable offset, which stands still while a
transaction is open.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from kappa_ingest import settling
from kappa_ingest.errors import KafkaUnavailable
from kappa_ingest.kafka.settings import connection_conf

TIMEOUT_S = 10.0
# A dead leader is replaced within Kafka's broker.session.timeout.ms (9 s) and an election.
END_OFFSETS_TIMEOUT_S = 30.0


class TopicConfigRefused(KafkaUnavailable):
    """The cluster refused a topic for its configs (a policy's limit, a value it does not take)."""


_CONFIG_REFUSALS = (KafkaError.POLICY_VIOLATION, KafkaError.INVALID_CONFIG)


# librdkafka's own connection chatter; the errors that matter reach error_cb and are raised.
LOG = logging.getLogger("kappa_ingest.kafka_admin")
LOG.addHandler(logging.NullHandler())
LOG.propagate = False
# Answers that a moment later may be different: a new topic's leaders settling, a leader
# that died (its requests time out until the metadata names the new one), a new leader that
# does not know its high watermark until its followers have caught up (seen after a broker
# was killed mid-run: OFFSET_NOT_AVAILABLE "Leader high watermark is not caught up").
_SETTLING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
             KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._UNKNOWN_PARTITION,
             KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH}  # fmt: skip
QUERY_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class TopicShape:
    partitions: int
    replication: int  # the least replicated partition's replicas


class Admin:
    """A connection to one cluster for the driver's questions."""

    def __init__(
        self, bootstrap_servers: str, settings: dict[str, str] | None = None, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_s
        self.errors: list[KafkaError] = []
        conf: dict[str, Any] = {**connection_conf(settings, bootstrap_servers), "error_cb": self.errors.append,
                                "logger": LOG}  # fmt: skip
        self.conf = conf
        self.user = conf.get("sasl.username")
        self.client = AdminClient(conf)
        self._watermarks = Watermarks(conf)
        self._broker_settings: dict[str, str | None] | None = None
        self._asking_broker = threading.Lock()  # a second asker waits for the first's answer

    def _unavailable(self, what: str, cause: object) -> KafkaUnavailable:
        self.client.poll(0)  # serves error_cb: a refused password is the cause to name
        auth = [e for e in self.errors if e.code() == KafkaError._AUTHENTICATION]
        if auth:
            return KafkaUnavailable(
                f"Kafka at {self.bootstrap_servers} refused authentication ({auth[0].str()}); check sasl settings"
            )
        return KafkaUnavailable(
            f"Kafka unreachable at {self.bootstrap_servers} ({what}: {cause}); check --bootstrap-servers and that the brokers run"
        )

    def check_reachable(self, timeout_s: float = TIMEOUT_S) -> int:
        """The number of brokers; KafkaUnavailable if none answers in ``timeout_s``, at once
        if a broker refused our credentials (librdkafka retries those until its timeout)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return len(self.client.list_topics(timeout=min(1.0, timeout_s)).brokers)
            except KafkaException as e:
                self.client.poll(0)  # serves error_cb
                if time.monotonic() >= deadline or any(x.code() == KafkaError._AUTHENTICATION for x in self.errors):
                    raise self._unavailable("no metadata", e.args[0]) from e

    def describe(self, topic: str, created: bool = False) -> TopicShape | None:
        """The topic's partitions and replication, or None if it does not exist (or this user
        may not see it). A describe request, never a metadata request naming the topic: on a
        broker with auto.create.topics.enable that would create it with the broker's defaults.
        ``created``: just created here, so a broker that does not know it yet (brokers learn
        of a new topic one by one) is asked again within the bound."""
        from confluent_kafka import TopicCollection

        # Describing asks the broker the metadata names as controller; one that has just
        # died stays named by the client (and by the others until they fence it). So:
        # short tries within the bound, each from a client that learns the cluster afresh.
        wait = self.timeout_s / 3
        deadline = time.monotonic() + self.timeout_s
        while True:
            last = time.monotonic() + wait >= deadline
            try:
                found = self.client.describe_topics(TopicCollection([topic]), request_timeout=wait)[topic].result(wait)
                break
            except KafkaException as e:
                err = e.args[0]
                unknown = err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                if unknown and created and not last:
                    time.sleep(0.1)
                    continue
                if unknown or err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    return None
                if last or not (err.retriable() or err.code() == KafkaError._TIMED_OUT):
                    raise self._unavailable(f"no metadata for topic {topic}", err) from e
            except TimeoutError as e:  # the future's own wait (an admin request gets no answer)
                if last:
                    raise self._unavailable(f"no metadata for topic {topic}", f"no answer in {wait:.0f} s") from e
            self.client = AdminClient(self.conf)
        return TopicShape(len(found.partitions), min((len(p.replicas) for p in found.partitions), default=0))

    def partitions(self, topic: str) -> int | None:
        shape = self.describe(topic)
        return None if shape is None else shape.partitions

    def ensure_topic(
        self,
        topic: str,
        partitions: int,
        replication_factor: int,
        config: dict[str, str] | None = None,
        seen_absent: bool = False,
    ) -> bool:
        """Create ``topic`` if absent (with ``config``); True if this call created it.
        ``seen_absent``: the caller has just seen it absent (not asked again; one that
        appeared meanwhile is found by the creation)."""
        if not seen_absent and self.partitions(topic) is not None:
            return False
        futures = self.client.create_topics([NewTopic(topic, partitions, replication_factor, config=config or {})])
        try:
            futures[topic].result(TIMEOUT_S)
        except TimeoutError as e:
            raise self._unavailable(f"creating topic {topic}", f"no answer in {TIMEOUT_S:.0f} s") from e
        except KafkaException as e:
            err = e.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            if err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                raise KafkaUnavailable(
                    f"topic {topic!r} does not exist and {self._who()} may not create it (Kafka ACL: no CREATE on"
                    " the topic or the cluster): the topic must be created by an admin, or CREATE granted"
                ) from e
            refused = TopicConfigRefused if err.code() in _CONFIG_REFUSALS else KafkaUnavailable
            raise refused(f"Kafka refused to create topic {topic!r}: {err.str()}") from e
        self._wait_for_leaders(topic)
        return True

    def check_writable(self, topic: str) -> None:
        """KafkaUnavailable, naming the topic and the operation, unless this user may write to
        ``topic``: said before Spark sends anything, not as a failed task's stack trace."""
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AclOperation

        try:
            described = self.client.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
            allowed = described[topic].result(TIMEOUT_S).authorized_operations
        except TimeoutError:
            return  # the producer's own error will say what is wrong
        except KafkaException as e:
            if e.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                allowed = []
            else:
                return  # the producer's own error will say what is wrong
        if allowed is None:
            return  # a broker that does not tell
        missing = [op for op in (AclOperation.DESCRIBE, AclOperation.WRITE) if op not in allowed]
        if missing and AclOperation.ALL not in allowed:
            names = " and ".join(op.name for op in missing)
            raise KafkaUnavailable(
                f"{self._who()} may not write to topic {topic!r} (Kafka ACL: no {names} on it); ask an admin for"
                f" kafka-acls.sh --add --allow-principal User:{self.user or 'USER'} --operation Write"
                f" --operation Describe --topic {topic}"
            )

    def _who(self) -> str:
        return f"user {self.user!r}" if self.user else "this client"

    def _wait_for_leaders(self, topic: str) -> None:
        """A new topic is usable once every partition has a leader (bounded wait)."""
        from confluent_kafka import TopicCollection

        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                t = self.client.describe_topics(TopicCollection([topic]))[topic].result(TIMEOUT_S)
                if t.partitions and all(p.leader is not None for p in t.partitions):
                    return
            except TimeoutError:
                pass
            except KafkaException as e:
                if e.args[0].code() not in _SETTLING:
                    raise self._unavailable(f"topic {topic} created, no metadata", e.args[0]) from e
            time.sleep(0.1)
        raise KafkaUnavailable(f"topic {topic!r} was created but its partitions got no leader in {TIMEOUT_S:.0f} s")

    def end_offsets(
        self, topic: str, timeout_s: float = END_OFFSETS_TIMEOUT_S, partitions: int | None = None
    ) -> dict[int, int]:
        """The topic's end offset (high watermark) per partition, as the broker reports it;
        KafkaUnavailable if it cannot be read within ``timeout_s``. ``partitions``: known
        (a round trip saved; a topic deleted meanwhile then fails after ``timeout_s``, where
        one asked gives {}), else asked."""
        n = partitions if partitions is not None else self.partitions(topic)
        if n is None:
            return {}
        try:
            return self._watermarks.query(topic, n, timeout_s)
        except KafkaException as e:
            raise self._unavailable("reading end offsets", e.args[0]) from e

    def brokers(self) -> int:
        return len(self.client.list_topics(timeout=TIMEOUT_S).brokers)

    def broker_ids(self) -> list[int]:
        return sorted(self.client.list_topics(timeout=TIMEOUT_S).brokers)

    def set_topic_config(self, topic: str, name: str, value: str) -> bool:
        """Set one config of an existing topic; False if Kafka refused (no ALTER_CONFIGS, say)."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic,
                                  incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
        try:
            self.client.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
        except (KafkaException, TimeoutError):
            return False
        return True

    def broker_setting(self, name: str) -> str | None:
        """A broker's value of ``name`` (the first broker's), or None if it cannot be read
        (no DESCRIBE_CONFIGS permission, say). All its settings asked at once, once per
        connection: a run asks two, a watch's batches share one, and one that fails is
        dropped with what it knew."""
        with self._asking_broker:
            if self._broker_settings is None:
                try:
                    broker = min(self.client.list_topics(timeout=TIMEOUT_S).brokers)
                except (KafkaException, ValueError):
                    return None
                self._broker_settings = self._configs(ConfigResource.Type.BROKER, str(broker))
                if self._broker_settings is None:
                    return None
            return self._broker_settings.get(name)

    def warm(self, topic: str) -> None:
        """Start connecting the end offsets' client (on a thread), asking ``topic``."""
        self._watermarks.warm(topic)

    def topic_setting(self, topic: str, name: str) -> str | None:
        """The topic's value of ``name`` (its own, or the brokers' default it inherits), or
        None if the topic does not exist or its configs cannot be read."""
        return (self._configs(ConfigResource.Type.TOPIC, topic) or {}).get(name)

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` and wait for the controller to accept it (its log goes soon after)."""
        self.client.delete_topics([topic])[topic].result(self.timeout_s)

    def _configs(self, kind: ConfigResource.Type, resource_name: str) -> dict[str, str | None] | None:
        try:
            resource = ConfigResource(kind, resource_name)
            entries = self.client.describe_configs([resource])[resource].result(TIMEOUT_S)
        except (KafkaException, ValueError, TimeoutError):
            return None
        return {name: entry.value for name, entry in entries.items()}

    def close(self) -> None:
        """Release the consumer and the admin client (this AdminClient has no close(): its
        handle goes with the object)."""
        self._watermarks.close()
        self.client = None  # type: ignore[assignment]

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Watermarks:
    """High watermarks (``read_uncommitted``: appended, committed or not) through one
    kept consumer.

    Retried within the timeout while the answer may change: a topic just created, a
    leader that died. librdkafka keeps asking the leader its metadata names, dead or not,
    so after an error the consumer is replaced (fresh metadata)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self._consumer: Consumer | None = None
        self._warming: threading.Thread | None = None

    def warm(self, topic: str) -> None:
        """Connect to ``topic``'s first partition's leader on a thread of its own, while the
        caller waits for something else: the next query then takes one round trip, not the
        four of a new client (bootstrap, metadata, the leader's connection, the offsets). One
        try, whatever it answers: a real problem is the query's to report."""

        def connect() -> None:
            consumer = self._client()
            try:
                consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=QUERY_TIMEOUT_S)
            except KafkaException:  # stale metadata, say: the query starts from a new client
                self._consumer = None
                consumer.close()

        if self._warming is None and self._consumer is None:
            self._warming = threading.Thread(target=connect, name="watermarks-warm", daemon=True)
            self._warming.start()

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({**self.conf, "group.id": "kappa-ingest-offsets", "logger": LOG,
                                       "enable.auto.commit": False, "isolation.level": "read_uncommitted"})  # fmt: skip
        return self._consumer

    def _warmed(self) -> None:
        if self._warming is not None:
            self._warming.join()  # bounded: one query of QUERY_TIMEOUT_S
            self._warming = None

    def query(self, topic: str, partitions: int, timeout_s: float = TIMEOUT_S) -> dict[int, int]:
        """The last KafkaException if the answer does not come within ``timeout_s``."""
        self._warmed()
        deadline = time.monotonic() + timeout_s
        while True:
            query_s = max(0.1, min(QUERY_TIMEOUT_S, deadline - time.monotonic()))
            try:
                # One ListOffsets request per leader (timestamp -1: the latest), not one per partition.
                asked = [TopicPartition(topic, p, -1) for p in range(partitions)]
                found = self._client().offsets_for_times(asked, timeout=query_s)
                failed = next((tp.error for tp in found if tp.error is not None), None)
                if failed is not None:
                    raise KafkaException(failed)
                return {tp.partition: tp.offset for tp in found}
            except KafkaException as e:
                self.close()
                if e.args[0].code() not in _SETTLING or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def close(self) -> None:
        self._warmed()
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()


def high_watermarks(conf: dict[str, Any], topic: str, partitions: int, timeout_s: float = TIMEOUT_S) -> dict[int, int]:
    """One query of :class:`Watermarks`."""
    w = Watermarks(conf)
    try:
        return w.query(topic, partitions, timeout_s)
    finally:
        w.close()


Producers = dict[tuple[int, int], tuple[int, int]]  # (partition, producer id) -> (epoch, last sequence)


def python_admin(admin_conf: dict[str, Any], timeout_s: float, bootstrap_timeout_s: float | None = None) -> Any:
    """A kafka-python admin client (it asks what confluent-kafka cannot: KIP-664's producers
    and transactions); ``bootstrap_timeout_s``: how long it may take to connect (else 30 s)."""
    from kafka.admin import KafkaAdminClient

    conf = {k: v for k, v in admin_conf.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
    if bootstrap_timeout_s is not None:
        conf["bootstrap_timeout_ms"] = int(bootstrap_timeout_s * 1000)
    return KafkaAdminClient(**conf, request_timeout_ms=int(timeout_s * 1000))


def producers(
    admin_conf: dict[str, Any], topic: str, partitions: int, timeout_s: float = 5.0, client: Any = None
) -> Producers | None:
    """The idempotent and transactional producers the topic's partition leaders keep state
    of (DescribeProducers, KIP-664), or None if they cannot be asked (an old broker, no
    permission). A producer that wrote between two readings shows as new or changed.
    ``client``: a :func:`python_admin` kept by the caller (else one made and closed here)."""
    from kafka import TopicPartition as KafkaPartition

    try:
        admin = client or python_admin(admin_conf, timeout_s)
        try:
            found = admin.describe_producers([KafkaPartition(topic, p) for p in range(partitions)])
        finally:
            if client is None:
                admin.close()
    except Exception:  # noqa: BLE001 - see above: the run then reads back what it sent
        return None
    return {(tp.partition, s.producer_id): (s.producer_epoch, s.last_sequence)
            for tp, state in found.items() for s in state.active_producers}  # fmt: skip


def writers(before: Producers, after: Producers) -> set[int]:
    """The producer ids that wrote between two readings."""
    return {pid for key, state in after.items() if before.get(key) != state for pid in [key[1]]}


FAILED_RUN_OFFSETS_TIMEOUT_S = 3.0


def settled_offsets(
    admin: Admin, topic: str, before: dict[int, int], expected: int, timeout_s: float = 10.0
) -> dict[int, int]:
    """End offsets once the broker has appended what was sent. With ``acks=0`` (or 1 and a
    lagging replica) producers finish before the log does, and commit markers follow a
    commit; wait, bounded, until the offsets reach ``expected`` or stop moving for a second."""
    base = sum(before.values())
    # The partitions it had before, asked beside whether it has more now (added during the run).
    with ThreadPoolExecutor(1, thread_name_prefix="shape") as pool:
        now_partitions = pool.submit(admin.partitions, topic)
        after = admin.end_offsets(topic, partitions=len(before) or None)
        partitions = max(now_partitions.result() or 0, len(after)) or None
    if partitions is not None and partitions > len(after):
        after = admin.end_offsets(topic, partitions=partitions)
    deadline = time.monotonic() + timeout_s
    still_since = time.monotonic()
    waits = settling.pauses()  # the last commit's markers follow it by milliseconds
    while sum(after.values()) - base < expected and time.monotonic() < deadline:
        time.sleep(next(waits))
        now = admin.end_offsets(topic, partitions=partitions)
        if sum(now.values()) != sum(after.values()):
            still_since = time.monotonic()
        elif time.monotonic() - still_since > 1.0:
            break
        after = now
    return after


def offsets_if_reachable(admin: Admin, topic: str) -> dict[int, int] | None:
    """The end offsets after a failed job, if Kafka answers quickly (it may be what failed)."""
    admin.timeout_s = FAILED_RUN_OFFSETS_TIMEOUT_S
    try:
        return admin.end_offsets(topic, FAILED_RUN_OFFSETS_TIMEOUT_S)
    except KafkaUnavailable:
        return None
