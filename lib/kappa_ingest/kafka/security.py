"""Security for the embedded Kafka: TLS, SCRAM-SHA-512 users and ACLs.

A secured cluster (``local_kafka.start(..., security="sasl_ssl")``) gets, at every start, a
new certificate authority and broker certificate (the CA's key is never written: nobody can
sign another certificate the clients would trust) and random passwords for its users,
readable by their owner only under ``<state_dir>/secrets/<user>.password``. Clients trust
``<state_dir>/tls/ca.pem``. ``admin`` is the super user; everyone else needs ACLs, granted
here as admin.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kappa_ingest.errors import KafkaUnavailable, UsageError

if TYPE_CHECKING:
    from confluent_kafka.admin import AclBinding, AdminClient

PLAINTEXT = "plaintext"
SASL_SSL = "sasl_ssl"
MODES = (PLAINTEXT, SASL_SSL)
MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
ADMIN = "admin"
APP = "app"
CLUSTER_RESOURCE = "kafka-cluster"  # the one name Kafka gives the CLUSTER resource
# The brokers' certificate subject, their principal on the controller listener. No SCRAM user
# can take it: user names have no '='.
BROKER_SUBJECT = "kappa-ingest-broker"
BROKER_PRINCIPAL = f"CN={BROKER_SUBJECT}"
# Names go into StorageTool's "[name=...,salt=...]" syntax and into file names: no ',', '=', '/'.
_USER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
# The certificate outlives any local cluster; restart() reuses it, start() makes a new one.
CERT_VALIDITY = timedelta(days=365)


class LocalKafka(Protocol):
    """What securing a cluster needs to know of it (:class:`kappa_ingest.kafka.broker.LocalKafka`
    has it; the broker module uses this one, so this one does not import it)."""

    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def state_dir(self) -> Path: ...
    @property
    def security(self) -> str: ...
    @property
    def ca_file(self) -> Path | None: ...
    @property
    def secrets_dir(self) -> Path | None: ...


@dataclass(frozen=True)
class BrokerTls:
    ca_file: Path
    keystore: Path
    keystore_password: str


def tls_dir(state_dir: Path) -> Path:
    return state_dir / "tls"


def secrets_dir(state_dir: Path) -> Path:
    return state_dir / "secrets"


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file only its owner can read (never a moment with wider rights)."""
    path.unlink(missing_ok=True)  # an existing file would keep its old mode
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_tls(directory: Path) -> BrokerTls:
    """A new CA (its certificate in ``ca.pem``) and a broker key and certificate for 127.0.0.1
    and localhost, in a PKCS12 keystore with a random password."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kappa-ingest local Kafka CA")])
    ca_cert = (
        _certificate(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        _certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, BROKER_SUBJECT)]), ca_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        # Client auth too: the brokers present it to the controllers.
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    keystore_password = secrets.token_urlsafe(24)
    tls = BrokerTls(directory / "ca.pem", directory / "broker.p12", keystore_password)
    tls.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))  # public: clients read it
    tls.ca_file.chmod(0o644)
    encryption = serialization.BestAvailableEncryption(keystore_password.encode())
    write_private(tls.keystore, pkcs12.serialize_key_and_certificates(b"broker", key, cert, [ca_cert], encryption))
    return tls


def _certificate(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.now(UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))  # tolerates a clock a little behind
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def new_users(users: dict[str, str] | None) -> dict[str, str]:
    """``admin`` and ``app`` with random passwords, plus (or overridden by) ``users``."""
    chosen = {ADMIN: secrets.token_urlsafe(24), APP: secrets.token_urlsafe(24), **(users or {})}
    for name, secret in chosen.items():
        if not _USER_NAME.fullmatch(name):
            raise UsageError(f"Kafka user name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)")
        # librdkafka drops blanks around a setting's value: it would send another password.
        if not secret or secret != secret.strip() or any(c in secret for c in "\r\n\0"):
            raise UsageError(f"the password of Kafka user {name!r} must be one line, not starting or ending blank")
    return chosen


def write_secrets(directory: Path, users: dict[str, str]) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, secret in users.items():
        write_private(directory / f"{name}.password", secret.encode())


def password(cluster: LocalKafka, user: str) -> str:
    """The password of ``user``, as its secrets file holds it."""
    if cluster.secrets_dir is None:
        raise UsageError(f"the local Kafka in {cluster.state_dir} has no users: it runs {cluster.security}")
    return (cluster.secrets_dir / f"{user}.password").read_text()


def scram_argument(user: str, secret: str) -> str:
    """StorageTool's ``--add-scram`` value for ``user``: the salted password, never the password.

    StorageTool (org.apache.kafka.metadata.storage.ScramParser) reads ``salt`` and
    ``saltedpassword`` as standard Base64; SCRAM's SaltedPassword is PBKDF2 over the UTF-8
    password with the mechanism's HMAC, as Kafka's ScramFormatter computes it. It lets a
    client authenticate, so it is as secret as the password itself.
    """
    salt = secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac("sha512", secret.encode(), salt, SCRAM_ITERATIONS)
    b64 = base64.b64encode
    return (
        f"{MECHANISM}=[name={user},salt={b64(salt).decode()},"
        f"saltedpassword={b64(salted).decode()},iterations={SCRAM_ITERATIONS}]"
    )


def broker_properties(tls: BrokerTls, admin_password: str) -> dict[str, str]:
    """server.properties entries of a SASL_SSL listener named SASL_SSL, also inter-broker, and
    of an SSL controller listener taking the brokers' certificate only."""
    # Brokers talk to each other over the clients' listener, as admin: one listener, one
    # set of credentials to protect, no separate port to secure.
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required"
        f' username="{ADMIN}" password="{_jaas_quoted(admin_password)}";'
    )
    return {
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _properties_escaped(jaas),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": _properties_escaped(str(tls.keystore)),
        "ssl.keystore.password": _properties_escaped(tls.keystore_password),
        # The broker must trust its own certificate: it connects to itself as inter-broker client.
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": _properties_escaped(str(tls.ca_file)),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # Brokers and controllers reach the controller listener with this principal (the
        # certificate's subject). Over PLAINTEXT they would be User:ANONYMOUS, which must then
        # be a super user (else ControllerRegistration fails, CLUSTER_AUTHORIZATION_FAILED)
        # and then any local process could, through bootstrap.controllers, create ACLs or
        # users without a password. SCRAM cannot secure that listener: the controllers serve
        # the very metadata that holds the credentials.
        "listener.name.controller.ssl.client.auth": "required",
        "super.users": f"User:{ADMIN};User:{BROKER_PRINCIPAL}",
        "allow.everyone.if.no.acl.found": "false",
    }


def _jaas_quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _properties_escaped(value: str) -> str:
    """A java.util.Properties value. Kafka reads the file as ISO-8859-1, so all but printable
    ASCII goes as \\uXXXX; backslash is the escape."""
    out = []
    for c in value.replace("\\", "\\\\"):
        if " " <= c <= "~":
            out.append(c)
        else:
            units = c.encode("utf-16-be")
            out += [f"\\u{units[i : i + 2].hex()}" for i in range(0, len(units), 2)]
    return "".join(out)


def client_settings(cluster: LocalKafka, user: str = APP) -> dict[str, str]:
    """Settings of a Java client (Kafka's names; Spark's with a ``kafka.`` prefix) for ``user``.

    A Java client authenticates with ``sasl.jaas.config``; ``sasl.username`` and
    ``sasl.password`` say the same for code that builds its own (Java ignores them)."""
    settings = {"bootstrap.servers": cluster.bootstrap_servers}
    if cluster.security == PLAINTEXT:
        return {**settings, "security.protocol": "PLAINTEXT"}
    return {
        **settings,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required"
            f' username="{user}" password="{_jaas_quoted(password(cluster, user))}";'
        ),
        "sasl.username": user,
        "sasl.password": password(cluster, user),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(cluster.ca_file),
    }


def confluent_settings(cluster: LocalKafka, user: str = APP) -> dict[str, str]:
    """Settings of a confluent-kafka (librdkafka) client for ``user``."""
    settings = {"bootstrap.servers": cluster.bootstrap_servers}
    if cluster.security == PLAINTEXT:
        return settings
    return {
        **settings,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password(cluster, user),
        "ssl.ca.location": str(cluster.ca_file),
    }


def admin_client(cluster: LocalKafka) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    return AdminClient(confluent_settings(cluster, ADMIN))


def grant(
    cluster: LocalKafka,
    user: str,
    resource: str,
    name: str,
    operations: Iterable[str],
    *,
    prefixed: bool = False,
    timeout_s: float = 30.0,
) -> None:
    """Allow ``user`` the ``operations`` (``"WRITE"``, ...) on one resource (``"TOPIC"``,
    ``"GROUP"``, ``"TRANSACTIONAL_ID"``, ``"CLUSTER"``) named ``name``, or on every resource
    whose name starts with ``name`` if ``prefixed``."""
    _create(cluster, [_binding(user, resource, name, op, prefixed) for op in operations], timeout_s)


def grant_producer(cluster: LocalKafka, user: str, topic: str, transactional_id_prefix: str | None = None) -> None:
    """What ``user`` needs to create ``topic`` and write to it, idempotently, and with
    transactions whose ids start with ``transactional_id_prefix`` if given."""
    bindings = [_binding(user, "TOPIC", topic, op, False) for op in ("WRITE", "DESCRIBE", "CREATE")]
    bindings.append(_binding(user, "CLUSTER", CLUSTER_RESOURCE, "IDEMPOTENT_WRITE", False))
    if transactional_id_prefix is not None:
        bindings += [
            _binding(user, "TRANSACTIONAL_ID", transactional_id_prefix, op, True) for op in ("WRITE", "DESCRIBE")
        ]
    _create(cluster, bindings)


def grant_consumer(cluster: LocalKafka, user: str, topic: str, group: str) -> None:
    """What ``user`` needs to read ``topic`` in consumer group ``group``."""
    bindings = [_binding(user, "TOPIC", topic, op, False) for op in ("READ", "DESCRIBE")]
    bindings += [_binding(user, "GROUP", group, op, False) for op in ("READ", "DESCRIBE")]
    _create(cluster, bindings)


def _binding(user: str, resource: str, name: str, operation: str, prefixed: bool) -> AclBinding:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    restype = ResourceType.BROKER if resource == "CLUSTER" else ResourceType[resource]  # librdkafka's name for it
    return AclBinding(restype, name, pattern, f"User:{user}", "*", AclOperation[operation], AclPermissionType.ALLOW)


def _create(cluster: LocalKafka, bindings: list[AclBinding], timeout_s: float = 30.0) -> None:
    """Create ``bindings``; return once the broker answering enforces them (ACLs reach the
    brokers through the metadata log, a little after the controller commits them)."""
    from confluent_kafka.admin import AclBindingFilter

    if cluster.security == PLAINTEXT:
        raise UsageError(f"the local Kafka in {cluster.state_dir} has no authorizer: it runs plaintext")
    admin = admin_client(cluster)
    for future in admin.create_acls(bindings, request_timeout=timeout_s).values():
        future.result()
    deadline = time.monotonic() + timeout_s
    for b in bindings:
        wanted = AclBindingFilter(
            b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type
        )
        while not admin.describe_acls(wanted, request_timeout=timeout_s).result():
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"ACL {b} not in effect after {timeout_s:.0f} s")
            time.sleep(0.1)
