"""One vocabulary for producer settings: Kafka's own (Java) names.

The table below maps each accepted name to librdkafka (confluent-kafka) and kafka-python;
Spark's sink takes the Java names as ``kafka.<name>`` options unchanged. A setting a client
cannot honour is a usage error that lists what that client accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kappa_ingest.errors import UsageError

DEFAULT_PRODUCER_SETTINGS = {"acks": "all", "enable.idempotence": "true"}

# Settings the job sets itself; a user value would break the record contract.
RESERVED = {"bootstrap.servers", "key.serializer", "value.serializer", "transactional.id"}

SECRET_MARKERS = ("password", "secret", "jaas", "token", "key.password")


def is_secret(name: str) -> bool:
    return any(m in name.lower() for m in SECRET_MARKERS)


def _int(v: str) -> int:
    return int(v)


def _bool(v: str) -> bool:
    text = str(v).strip().lower()
    if text not in ("true", "false"):
        raise ValueError("expected true or false")
    return text == "true"


def _acks_python(v: str) -> int | str:
    return "all" if v in ("all", "-1") else int(v)


def _kbytes(v: str) -> int:
    return max(1, int(v) // 1024)


def _same(v: str) -> str:
    return v


# java name -> (librdkafka name, converter) | None, (kafka-python name, converter) | None
Translation = tuple[str, Callable[[str], Any]] | None
TABLE: dict[str, tuple[Translation, Translation]] = {
    "acks": (("acks", _same), ("acks", _acks_python)),
    "enable.idempotence": (("enable.idempotence", _bool), ("enable_idempotence", _bool)),
    "batch.size": (("batch.size", _int), ("batch_size", _int)),
    "linger.ms": (("linger.ms", _int), ("linger_ms", _int)),
    "compression.type": (("compression.type", _same), ("compression_type", lambda v: None if v == "none" else v)),
    "retries": (("retries", _int), ("retries", _int)),
    "retry.backoff.ms": (("retry.backoff.ms", _int), ("retry_backoff_ms", _int)),
    "max.in.flight.requests.per.connection": (
        ("max.in.flight.requests.per.connection", _int),
        ("max_in_flight_requests_per_connection", _int),
    ),
    "request.timeout.ms": (("request.timeout.ms", _int), ("request_timeout_ms", _int)),
    "delivery.timeout.ms": (("delivery.timeout.ms", _int), ("delivery_timeout_ms", _int)),
    "transaction.timeout.ms": (("transaction.timeout.ms", _int), ("transaction_timeout_ms", _int)),
    "buffer.memory": (("queue.buffering.max.kbytes", _kbytes), ("buffer_memory", _int)),
    "max.request.size": (("message.max.bytes", _int), ("max_request_size", _int)),
    "client.id": (("client.id", _same), ("client_id", _same)),
    "security.protocol": (("security.protocol", _same), ("security_protocol", _same)),
    "sasl.mechanism": (("sasl.mechanism", _same), ("sasl_mechanism", _same)),
    # Java clients carry credentials in sasl.jaas.config; these two are the plain form of it,
    # turned into a JAAS line for Spark's sink by for_spark.
    "sasl.username": (("sasl.username", _same), ("sasl_plain_username", _same)),
    "sasl.password": (("sasl.password", _same), ("sasl_plain_password", _same)),
}

CLIENTS = {"confluent": 0, "kafka-python": 1}
# What every client of the cluster needs to connect, producer or not (admin, ledger reader, read-back).
CONNECTION_KEYS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "client.id")


def connection_conf(settings: dict[str, str] | None, bootstrap_servers: str) -> dict[str, Any]:
    """librdkafka settings to connect to the cluster (for the driver's admin, consumers and fencing)."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap_servers}
    for key in CONNECTION_KEYS:
        if settings and key in settings:
            target, convert = TABLE[key][0]  # type: ignore[misc]
            conf[target] = convert(settings[key])
    return conf


def validate_settings(settings: dict[str, str], sink: str) -> None:
    """Reject names the chosen sink cannot honour, and values that do not convert."""
    for name, value in settings.items():
        if name in RESERVED:
            raise UsageError(f"--kafka-opt {name}: set by kappa-ingest itself and cannot be overridden")
        if sink == "spark":
            continue
        entry = TABLE.get(name)
        if entry is None or entry[CLIENTS[sink]] is None:
            accepted = ", ".join(n for n, e in TABLE.items() if e[CLIENTS[sink]] is not None)
            raise UsageError(f"--kafka-opt {name}: not supported by the {sink} sink; accepted: {accepted}")
        _target, convert = entry[CLIENTS[sink]]
        try:
            convert(value)
        except (TypeError, ValueError) as e:
            raise UsageError(f"--kafka-opt {name}={value!r}: {e}") from e


def for_confluent(settings: dict[str, str], bootstrap_servers: str) -> dict[str, Any]:
    """librdkafka configuration for confluent-kafka's Producer."""
    # librdkafka's own default partitions keys by CRC32; Java's clients (Spark's sink, Kafka
    # Streams) and kafka-python by murmur2: with it a key lands in the same partition whichever
    # client wrote it, so topics stay co-partitioned with what other producers write.
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "partitioner": "murmur2_random"}
    for name, value in settings.items():
        target, convert = TABLE[name][0]  # type: ignore[misc]
        conf[target] = convert(value)
    return conf


def for_kafka_python(settings: dict[str, str], bootstrap_servers: str) -> dict[str, Any]:
    """Keyword arguments for kafka-python's KafkaProducer."""
    conf: dict[str, Any] = {"bootstrap_servers": bootstrap_servers.split(",")}
    for name, value in settings.items():
        target, convert = TABLE[name][1]  # type: ignore[misc]
        conf[target] = convert(value)
    if "delivery_timeout_ms" in conf:  # a producer that cannot bootstrap cannot deliver either
        conf["bootstrap_timeout_ms"] = conf["delivery_timeout_ms"]
    return conf


def for_spark(settings: dict[str, str], bootstrap_servers: str, run_id: str) -> dict[str, str]:
    """Options for Spark's Kafka sink: the Java names prefixed with ``kafka.``."""
    opts = {"kafka.bootstrap.servers": bootstrap_servers}
    # Spark caches one producer per executor for each distinct set of options, across runs
    # of one session (a notebook). A producer can outlive its run with records in flight:
    # after a MESSAGE_TOO_LARGE split its flush() returns early (KAFKA-19479), and the next
    # run's flush() would wait for those records until delivery.timeout.ms. A client.id
    # per run gives every run a producer of its own (and names the run in broker metrics).
    plain = {"client.id": f"kappa-ingest-{run_id}", **settings}
    user, password = plain.pop("sasl.username", None), plain.pop("sasl.password", None)
    if user is not None and "sasl.jaas.config" not in plain:
        module = (
            "plain.PlainLoginModule" if plain.get("sasl.mechanism", "PLAIN") == "PLAIN" else "scram.ScramLoginModule"
        )
        plain["sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.{module} required username={_jaas_quote(user)} "
            f"password={_jaas_quote(password or '')};"
        )
    # Spark's sink cannot set record timestamps; this interceptor does (interceptor.py).
    interceptors = [c for c in plain.pop("interceptor.classes", "").split(",") if c.strip()]
    plain["interceptor.classes"] = ",".join(["kappa.ingest.TimestampFromHeader", *interceptors])
    opts.update({f"kafka.{k}": v for k, v in plain.items()})
    return opts


def _jaas_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
