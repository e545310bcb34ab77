"""One vocabulary for producer settings: Kafka's own (Java) names.

The table below maps each accepted name to librdkafka (confluent-kafka) and kafka-python;
Spark's sink takes the Java names as ``kafka.<name>`` options unchanged. A setting a client
cannot honour is a usage error that lists what that client accepts.
"""

from __future__ import annotations

import re
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
    n = int(v)
    if n < 0:
        raise ValueError("expected zero or a positive whole number")
    return n


def _choice(*accepted: str) -> Callable[[str], str]:
    """A value from a fixed set (case as Kafka writes it); anything else is refused before
    a topic is created or a task started."""

    def convert(v: str) -> str:
        if v not in accepted:
            raise ValueError(f"accepted: {', '.join(accepted)}")
        return v

    return convert


_compression = _choice("none", "gzip", "snappy", "lz4", "zstd")
_protocol = _choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_mechanism = _choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")


def _bool(v: str) -> bool:
    text = str(v).strip().lower()
    if text not in ("true", "false"):
        raise ValueError("expected true or false")
    return text == "true"


def _acks(v: str) -> str:
    return _choice("all", "-1", "0", "1")(v)


def _acks_python(v: str) -> int | str:
    return "all" if _acks(v) in ("all", "-1") else int(v)


def _kbytes(v: str) -> int:
    return max(1, int(v) // 1024)


def _same(v: str) -> str:
    return v


def _compression_python(v: str) -> str | None:
    return None if _compression(v) == "none" else v


# java name -> (librdkafka name, converter) | None, (kafka-python name, converter) | None
Translation = tuple[str, Callable[[str], Any]] | None
TABLE: dict[str, tuple[Translation, Translation]] = {
    "acks": (("acks", _acks), ("acks", _acks_python)),
    "enable.idempotence": (("enable.idempotence", _bool), ("enable_idempotence", _bool)),
    "batch.size": (("batch.size", _int), ("batch_size", _int)),
    "linger.ms": (("linger.ms", _int), ("linger_ms", _int)),
    "compression.type": (("compression.type", _compression), ("compression_type", _compression_python)),
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
    "security.protocol": (("security.protocol", _protocol), ("security_protocol", _protocol)),
    "sasl.mechanism": (("sasl.mechanism", _mechanism), ("sasl_mechanism", _mechanism)),
    # Java clients carry credentials in sasl.jaas.config; these two are the plain form of it,
    # turned into a JAAS line for Spark's sink by for_spark (and read out of one by _plain).
    "sasl.username": (("sasl.username", _same), ("sasl_plain_username", _same)),
    "sasl.password": (("sasl.password", _same), ("sasl_plain_password", _same)),
    # The CA that signed the brokers' certificates: Java reads it as a PEM "truststore";
    # the Python clients take the PEM file itself (a JKS or PKCS12 store only Java reads).
    "ssl.truststore.location": (("ssl.ca.location", _same), ("ssl_cafile", _same)),
    "ssl.endpoint.identification.algorithm": (
        ("ssl.endpoint.identification.algorithm", _choice("https", "none", "")),
        ("ssl_check_hostname", lambda v: _choice("https", "none", "")(v) == "https"),
    ),
}
# Java names that are not passed on as such but read by _plain: a JAAS line, the truststore's type.
FOLDED = {"sasl.jaas.config", "ssl.truststore.type"}

CLIENTS = {"confluent": 0, "kafka-python": 1}
# What every client of the cluster needs to connect, producer or not (admin, ledger reader, read-back).
CONNECTION_KEYS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "client.id",
                   "ssl.truststore.location", "ssl.endpoint.identification.algorithm")  # fmt: skip

_JAAS_FIELD = re.compile(r"""\b(username|password)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^\s;]+))""")


def jaas_fields(jaas: str) -> dict[str, str]:
    """The ``username`` and ``password`` a JAAS line holds, quoting undone."""
    return {m[1]: re.sub(r"\\(.)", r"\1", m[2]) if m[2] is not None else m[3] if m[3] is not None else m[4]
            for m in _JAAS_FIELD.finditer(jaas)}  # fmt: skip


def _plain(settings: dict[str, str]) -> dict[str, str]:
    """The settings with a JAAS line read into sasl.username/sasl.password (the Python
    clients' form) and the truststore's type checked: those clients read a PEM file only."""
    out = {k: v for k, v in settings.items() if k not in FOLDED}
    jaas = settings.get("sasl.jaas.config")
    if jaas:
        found = jaas_fields(jaas)
        if "username" not in found or "password" not in found:
            raise UsageError('--kafka-opt sasl.jaas.config: no username="..." password="..." in it (value not shown)')
        out.setdefault("sasl.username", found["username"])
        out.setdefault("sasl.password", found["password"])
    kind = settings.get("ssl.truststore.type", "PEM").upper()
    if kind != "PEM" and "ssl.truststore.location" in settings:
        raise UsageError(f"--kafka-opt ssl.truststore.type={kind}: this sink reads the CA as a PEM file only; export"
                         " it with 'keytool -exportcert -rfc -keystore STORE -alias ALIAS' and give"
                         " ssl.truststore.type=PEM, ssl.truststore.location=FILE")  # fmt: skip
    return out


# A metadata request that names a topic lets a broker with auto.create.topics.enable (Kafka's
# own default) create it, with the broker's partitions and cleanup policy, before the run
# creates it as asked: no client of a run may ask so (librdkafka allows it by default for
# producers and admin clients, kafka-python for every client).
NO_AUTO_CREATE = {"allow.auto.create.topics": False}


def connection_conf(settings: dict[str, str] | None, bootstrap_servers: str) -> dict[str, Any]:
    """librdkafka settings to connect to the cluster (for the driver's admin, consumers and fencing)."""
    return _connection(settings, CLIENTS["confluent"], {"bootstrap.servers": bootstrap_servers, **NO_AUTO_CREATE})


def kafka_python_connection(settings: dict[str, str] | None, bootstrap_servers: str) -> dict[str, Any]:
    """kafka-python settings to connect to the cluster (the driver's admin client: it lists
    transactions and producers, which confluent-kafka cannot)."""
    return _connection(settings, CLIENTS["kafka-python"], {"bootstrap_servers": bootstrap_servers.split(",")})


def _connection(settings: dict[str, str] | None, client: int, conf: dict[str, Any]) -> dict[str, Any]:
    plain = _plain(settings or {})
    for key in CONNECTION_KEYS:
        if key in plain:
            target, convert = TABLE[key][client]  # type: ignore[misc]
            conf[target] = convert(plain[key])
    return conf


def validate_settings(settings: dict[str, str], sink: str) -> None:
    """Reject names the chosen sink cannot honour, and values that do not convert."""
    for name in settings:
        if name in RESERVED:
            raise UsageError(f"--kafka-opt {name}: set by kappa-ingest itself and cannot be overridden")
    for name, value in (settings if sink == "spark" else _plain(settings)).items():
        entry = TABLE.get(name)
        if sink == "spark":  # Spark's sink passes any Java name on; the ones known here are checked
            if entry is not None:
                _check_value(name, value, entry[0] or entry[1])
            continue
        if entry is None or entry[CLIENTS[sink]] is None:
            accepted = ", ".join(n for n, e in TABLE.items() if e[CLIENTS[sink]] is not None)
            raise UsageError(f"--kafka-opt {name}: not supported by the {sink} sink; accepted: {accepted}")
        _check_value(name, value, entry[CLIENTS[sink]])


def _check_value(name: str, value: str, translation: Translation) -> None:
    assert translation is not None
    try:
        translation[1](value)
    except (TypeError, ValueError) as e:
        raise UsageError(f"--kafka-opt {name}={value!r}: {e}") from e


# librdkafka also ends a batch at batch.num.messages (10,000) records and at message.max.bytes
# (1,000,000): batches are bounded by batch.size alone, as Java's are. The largest record is
# still max.request.size's (the parser quarantines larger ones before they reach the producer).
BATCH_RECORDS_MAX = 1_000_000
# librdkafka holds at most 100,000 records queued by default: 29 MB of 290-byte records, less
# than two partitions' 8 MB batches in flight and filling behind them on a long link, so the
# producer stalled the task (at 100 ms of round trip a task's sending took 0.9 s longer).
# Records, then, as many as a run's batches need; the bytes bounded instead, at 256 MB (8
# partitions' 16 MB batches in flight and filling behind them), not librdkafka's
# 1 GB: it is the Python worker's memory, outside what Spark accounts for (--kafka-opt
# buffer.memory sets it).
QUEUED_RECORDS_MAX = 1_000_000
QUEUED_KBYTES_MAX = 256 * 1024
REQUEST_MAX_DEFAULT = 1_000_000
REQUEST_FRAMING = 64 * 1024


def for_confluent(settings: dict[str, str], bootstrap_servers: str) -> dict[str, Any]:
    """librdkafka configuration for confluent-kafka's Producer."""
    # librdkafka's own default partitions keys by CRC32; Java's clients (Spark's sink, Kafka
    # Streams) and kafka-python by murmur2: with it a key lands in the same partition whichever
    # client wrote it, so topics stay co-partitioned with what other producers write.
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "partitioner": "murmur2_random", **NO_AUTO_CREATE,
                            "batch.num.messages": BATCH_RECORDS_MAX, "queue.buffering.max.messages": QUEUED_RECORDS_MAX,
                            "queue.buffering.max.kbytes": QUEUED_KBYTES_MAX}  # fmt: skip
    for name, value in _plain(settings).items():
        target, convert = TABLE[name][0]  # type: ignore[misc]
        conf[target] = convert(value)
    if "batch.size" in conf and "max.request.size" not in settings:
        conf["message.max.bytes"] = max(REQUEST_MAX_DEFAULT, conf["batch.size"] + REQUEST_FRAMING)
    return conf


def for_kafka_python(settings: dict[str, str], bootstrap_servers: str) -> dict[str, Any]:
    """Keyword arguments for kafka-python's KafkaProducer."""
    conf: dict[str, Any] = {"bootstrap_servers": bootstrap_servers.split(","), "allow_auto_create_topics": False}
    for name, value in _plain(settings).items():
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
