"""The embedded local Kafka: KRaft brokers started from Maven Central's jars.

Used by ``make demo``, by the test suite's broker fixture, by ``kappa-ingest kafka
start|stop|status`` and by the ingest job when no bootstrap servers are configured and the
master is local. Every broker is a combined broker+controller; N of them form one cluster
with static voters. Brokers are stopped by the PID recorded in the state directory.

A cluster started with ``security="sasl_ssl"`` takes only SASL_SSL (SCRAM-SHA-512) clients,
authorized by ACLs: see kappa_ingest.kafka.security.

A broker JVM maps its start-up classes from a class archive (dynamic AppCDS, JDK 13+)
written once by a training broker at ``make setup`` (:func:`train_class_archive`): measured
here, 5.2 s and 6.0 s of CPU from launch to serving without it, 3.1 s and 3.1 s with it. The
archive is keyed by the JDK and the jars; a JVM that finds it stale ignores it, silently.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from kappa_ingest import processes
from kappa_ingest.errors import KafkaUnavailable, UsageError
from kappa_ingest.kafka import security as kafka_security
from kappa_ingest.kafka.security import ADMIN, PLAINTEXT, SASL_SSL
from kappa_ingest.paths import cache_dir, class_archive_at, conf_dir

KAFKA_VERSION = "4.1.1"
STATE_FILE = "cluster.json"


def jars_dir() -> Path:
    """Resolve the broker's jars into the cache once; later calls download nothing."""
    target = cache_dir() / f"kafka-{KAFKA_VERSION}"
    if (target / ".complete").exists():
        return target
    if shutil.which("mvn") is None:
        raise UsageError("Maven (mvn) is needed to fetch the Kafka broker jars; install Maven 3.8+")
    target.mkdir(parents=True, exist_ok=True)
    cmd = [
        "mvn", "-B", "-q", "-f", str(conf_dir() / "kafka-broker-pom.xml"),
        "dependency:copy-dependencies", f"-DoutputDirectory={target}", "-DincludeScope=runtime",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise UsageError(f"could not fetch the Kafka {KAFKA_VERSION} jars with Maven: {' | '.join(tail)}")
    (target / ".complete").write_text(KAFKA_VERSION)
    return target


CDS_QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def class_archive() -> Path | None:
    """Where the brokers' class archive for this JDK and these jars lives (None: no java)."""
    java = shutil.which("java")
    if java is None:
        return None
    return class_archive_at("kafka-broker", Path(java).resolve(), cache_dir() / f"kafka-{KAFKA_VERSION}")


def _class_archive_options() -> list[str]:
    archive = class_archive()
    return [f"-XX:SharedArchiveFile={archive}", *CDS_QUIET] if archive is not None and archive.exists() else []


def train_class_archive(work_dir: Path) -> Path | None:
    """Write the brokers' class archive: a broker started to dump its classes at exit serves
    what a run asks of it (topics made and described, transactions committed and aborted,
    records read back), then stops. None where there is no java or the JVM wrote none."""
    target = class_archive()
    if target is None:
        return None
    tmp = target.with_suffix(f".{time.time_ns()}.tmp")
    cluster = start(work_dir, jvm_options=(f"-XX:ArchiveClassesAtExit={tmp}", *CDS_QUIET))
    try:
        _train(cluster.bootstrap_servers)
    finally:
        cluster.stop()  # SIGTERM: the JVM exits cleanly, writing the archive as it does
    if not tmp.exists():
        return None
    tmp.replace(target)
    return target


def _train(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("train", 2, 1, config={"cleanup.policy": "compact"})])["train"].result(30)
    admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "train")])
    for commit in (True, False):
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"train-{commit}"})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(2000):
            p.produce("train", b"x" * 100, str(i).encode(), headers=[("h", b"v")])
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "train", "isolation.level": "read_committed"})
    c.assign([TopicPartition("train", p, 0) for p in (0, 1)])
    for _ in range(20):
        c.consume(1000, timeout=0.2)
    c.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _distinct_free_ports(count: int, taken: set[int]) -> list[int]:
    """``count`` free ports, none twice and none in ``taken``: a port just probed and released
    may be handed out again, and two listeners of one broker on the same port fail its config."""
    ports: list[int] = []
    for _ in range(100 * count + 100):
        if len(ports) == count:
            return ports
        candidate = free_port()
        if candidate not in taken and candidate not in ports:
            ports.append(candidate)
    raise KafkaUnavailable(f"could not find {count} distinct free ports on 127.0.0.1")


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


HOST_PORT, HOST_CONTROLLER_PORT = 9092, 9093  # a broker's ports on a lab host of its own


@dataclass(frozen=True)
class Host:
    """Where a broker runs: 127.0.0.1 here, or a lab host's address, the ``ip netns exec``
    prefix that puts it there, and the port of the delaying proxy it is advertised through."""

    address: str = "127.0.0.1"
    launch: tuple[str, ...] = ()
    advertised_port: int | None = None


@dataclass(frozen=True)
class Broker:
    node_id: int
    port: int
    controller_port: int
    pid: int
    host: str = "127.0.0.1"  # a lab host's address (kappa_ingest.lab)
    advertised_port: int | None = None  # where clients reach it, if not ``port`` (a lab's delaying proxy)
    launch: tuple[str, ...] = ()  # the prefix it runs under (a lab host's `ip netns exec NS`)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.advertised_port or self.port}"


@dataclass(frozen=True)
class LocalKafka:
    """A running local cluster, as recorded in ``<state_dir>/cluster.json``."""

    state_dir: Path
    brokers: tuple[Broker, ...]
    security: str = PLAINTEXT
    ca_file: Path | None = None  # the CA clients trust, if security is sasl_ssl
    secrets_dir: Path | None = None  # <user>.password files, if security is sasl_ssl
    plugins: tuple[Path, ...] = ()  # jars beside Kafka's on the brokers' classpath (a topic policy, say)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def alive(self) -> list[bool]:
        return [processes.alive(b.pid) for b in self.brokers]

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every broker by PID: SIGTERM, then SIGKILL after ``timeout_s``."""
        processes.stop([b.pid for b in self.brokers], timeout_s)
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)


def _server_properties(
    node_id: int,
    ports: list[tuple[int, int]],
    log_dir: Path,
    voters: str,
    protocols: tuple[str, str],
    extra: dict[str, str],
    stock: bool = False,
    host: str = "127.0.0.1",
    advertised: str | None = None,
) -> str:
    """server.properties of a combined node: ``protocols`` are those of the listener for
    clients and brokers (also its name) and of the controller listener; ``extra`` entries
    come last and win. ``stock``: Kafka's own defaults wherever a cluster of this size can
    run on them (auto-created topics, 50 transaction log partitions), as its quick start
    runs; else the settings the project's own broker is hardened with."""
    listener, controller = protocols
    port, cport = ports[node_id - 1]
    replicas = min(3, len(ports))
    internal = [  # Kafka's defaults ask for 3 replicas of its internal topics: a smaller cluster cannot have them
        f"offsets.topic.replication.factor={replicas}",
        f"transaction.state.log.replication.factor={replicas}",
        "transaction.state.log.min.isr=1",
        f"share.coordinator.state.topic.replication.factor={replicas}",
        "share.coordinator.state.topic.min.isr=1",
    ]
    hardened = [
        "num.partitions=1",
        # Kafka creates its transaction log at the first transaction, with 50 partitions by
        # default: over a second of a fresh broker's first run. One per broker serves here.
        f"transaction.state.log.num.partitions={len(ports)}",
        f"offsets.topic.num.partitions={len(ports)}",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
    ]
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node_id}",
            f"controller.quorum.voters={voters}",
            f"listeners={listener}://{host}:{port},CONTROLLER://{host}:{cport}",
            f"advertised.listeners={listener}://{advertised or f'{host}:{port}'}",
            "controller.listener.names=CONTROLLER",
            f"inter.broker.listener.name={listener}",
            f"listener.security.protocol.map={listener}:{listener},CONTROLLER:{controller}",
            f"log.dirs={log_dir}",
            *internal,
            *([] if stock else hardened),
            *(f"{k}={v}" for k, v in extra.items()),
            "",
        ]
    )


# Long: a cluster's start is an order of steps (format, launch, wait, record) with cleanup on failure.
def start(
    state_dir: Path | str,
    brokers: int = 1,
    port: int | None = None,
    heap: str = "512m",
    timeout_s: float = 90.0,
    properties: dict[str, str] | None = None,
    security: str = PLAINTEXT,
    users: dict[str, str] | None = None,
    stock: bool = False,
    hosts: list[Host] | None = None,
    jvm_options: tuple[str, ...] = (),
    plugins: tuple[Path, ...] = (),
) -> LocalKafka:
    """Format storage and start ``brokers`` KRaft brokers on 127.0.0.1; wait until they serve.
    ``stock``: on Kafka's own defaults (topics created on first mention, and so on) rather
    than the hardened settings, to try the job against Kafka as users run it.

    ``port`` fixes the first broker's port (the others take free ones); ``properties`` are
    added to every broker's server.properties. With ``security="sasl_ssl"`` the brokers get a
    new CA and certificate and take SCRAM-SHA-512 users ``admin`` (super user), ``app`` and
    ``users`` (name -> password; random passwords for admin and app unless given there).
    ``hosts``: one per broker, each on a lab host of its own (:mod:`kappa_ingest.lab`) on the
    ports Kafka is known by; the caller waits from where those addresses are reached.
    ``plugins``: jars put beside Kafka's on the brokers' classpath, for the classes
    ``properties`` name (``create.topic.policy.class.name``, an authorizer).
    Raises KafkaUnavailable, naming the log file, if a broker exits or does not answer in time.
    """
    if security not in kafka_security.MODES:
        raise UsageError(f"Kafka security {security!r}: choose one of {', '.join(kafka_security.MODES)}")
    if users and security == PLAINTEXT:
        raise UsageError("Kafka users need security='sasl_ssl'")
    state_dir = Path(state_dir).resolve()
    existing = status(state_dir)
    if existing is not None:
        raise UsageError(
            f"a local Kafka is already running from {state_dir} at {existing.bootstrap_servers};"
            " stop it first with 'kappa-ingest kafka stop'"
        )
    java = shutil.which("java")
    if java is None:
        raise UsageError("Java 17 is needed to run the local Kafka broker; install a JDK")
    if hosts is not None:  # a host of its own each: every port is free there
        ports = [(HOST_PORT, HOST_CONTROLLER_PORT)] * brokers
        places = hosts
    else:
        chosen = _distinct_free_ports(2 * brokers - (1 if port else 0), taken={port} if port else set())
        flat = ([port] if port else []) + chosen
        ports = [(flat[2 * i], flat[2 * i + 1]) for i in range(brokers)]
        places = [Host() for _ in range(brokers)]
    voters = ",".join(f"{i + 1}@{places[i].address}:{c}" for i, (_, c) in enumerate(ports))
    # May start with "-": passed as --cluster-id=ID so it is never read as an option.
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    classpath = _classpath(plugins)
    started: list[Broker] = []
    cluster, secured, scram = _prepare_security(state_dir, security, users)
    cluster = replace(cluster, plugins=tuple(Path(p).resolve() for p in plugins))
    # Secured, the controllers take mutual TLS only: see kafka_security.broker_properties.
    protocols = ("SASL_SSL", "SSL") if security == SASL_SSL else ("PLAINTEXT", "PLAINTEXT")
    node_dirs = [state_dir / f"broker-{node_id}" for node_id in range(1, brokers + 1)]
    try:
        # Every node's storage is formatted before any broker starts: the format tool is a JVM
        # of its own, and it need not run beside brokers already taking memory and threads.
        for node_id, node_dir in enumerate(node_dirs, start=1):
            if node_dir.exists():
                shutil.rmtree(node_dir)
            (node_dir / "logs").mkdir(parents=True)
            props = node_dir / "server.properties"
            place = places[node_id - 1]
            advertised = f"{place.address}:{place.advertised_port}" if place.advertised_port else None
            text = _server_properties(node_id, ports, node_dir / "data", voters, protocols,
                                      {**secured, **(properties or {})}, stock, place.address, advertised)  # fmt: skip
            kafka_security.write_private(props, text.encode())  # may hold the admin's password
            _format(java, classpath, node_dir, cluster_id, scram)
        for node_id, node_dir in enumerate(node_dirs, start=1):
            place = places[node_id - 1]
            pid = _launch(java, classpath, node_dir, heap, place.launch, jvm_options)
            started.append(
                Broker(node_id, *ports[node_id - 1], pid, place.address, place.advertised_port, place.launch)
            )
            cluster = replace(cluster, brokers=tuple(started))
            _write_state(cluster)
        _wait_ready(cluster, timeout_s)
    except BaseException:
        cluster.stop(timeout_s=5)
        raise
    return cluster


def _prepare_security(
    state_dir: Path, security: str, users: dict[str, str] | None
) -> tuple[LocalKafka, dict[str, str], list[str]]:
    """The cluster still without brokers, its brokers' security properties and StorageTool's
    arguments creating its SCRAM users: new certificates and passwords, for sasl_ssl."""
    tls_dir, secrets_dir = kafka_security.tls_dir(state_dir), kafka_security.secrets_dir(state_dir)
    for old in (tls_dir, secrets_dir):  # a previous start's credentials are never reused
        shutil.rmtree(old, ignore_errors=True)
    if security == PLAINTEXT:
        return LocalKafka(state_dir, ()), {}, []
    chosen = kafka_security.new_users(users)
    tls = kafka_security.make_tls(tls_dir)
    kafka_security.write_secrets(secrets_dir, chosen)
    scram = [arg for name, pw in chosen.items() for arg in ("--add-scram", kafka_security.scram_argument(name, pw))]
    cluster = LocalKafka(state_dir, (), security, tls.ca_file, secrets_dir)
    return cluster, kafka_security.broker_properties(tls, chosen[ADMIN]), scram


def _format(java: str, classpath: str, node_dir: Path, cluster_id: str, scram: list[str]) -> None:
    """Format the node's storage with StorageTool, adding the ``scram`` users' credentials."""
    # The arguments go in a file the java launcher expands, readable by us only and deleted
    # at once: a command line is visible to every local user (ps), and a SCRAM salted
    # password lets its holder authenticate as the password would.
    argfile = node_dir / "format.args"
    args = ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
            "-c", str(node_dir / "server.properties"), "--ignore-formatted", *scram]  # fmt: skip
    kafka_security.write_private(argfile, "\n".join(_argfile_quoted(a) for a in args).encode())
    log = node_dir / "logs" / "format.log"
    try:
        # A small heap: the tool writes a few files, and a default heap (a quarter of the
        # machine) is a large reservation beside running brokers and Spark.
        with open(log, "wb") as out:
            fmt = subprocess.run([java, "-Xmx128m", "-cp", classpath, f"@{argfile}"],
                                 stdout=out, stderr=subprocess.STDOUT, check=False)  # fmt: skip
    finally:
        argfile.unlink()
    if fmt.returncode != 0:
        cause = _java_failure(log.read_text(errors="replace"))
        raise KafkaUnavailable(f"formatting {node_dir.name} storage failed (exit {fmt.returncode}): {cause}; see {log}")


def _java_failure(output: str) -> str:
    """The line of a failed Java tool's output that says why: its deepest cause (``Caused by:``)
    or its exception, not a stack frame; else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("at ", "... "))]
    causes = [line for line in said if line.startswith("Caused by:") or "Exception" in line or "Error" in line]
    return ((causes or said or ["no output"])[-1])[:300]


def _argfile_quoted(arg: str) -> str:
    """One argument of a java launcher @file: quoted, where backslash is the escape."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _launch(
    java: str,
    classpath: str,
    node_dir: Path,
    heap: str,
    prefix: tuple[str, ...] = (),
    jvm_options: tuple[str, ...] = (),
) -> int:
    """Start one broker from its directory (server.properties, formatted data, logs/); its pid
    (``prefix``, a lab host's ``ip netns exec NS``, execs the broker in its place). The class
    archive is mapped where it has been made, unless ``jvm_options`` write one."""
    log_dir = node_dir / "logs"
    archive = [] if any("ArchiveClassesAtExit" in o for o in jvm_options) else _class_archive_options()
    with open(log_dir / "stdout.log", "ab") as out:
        proc = subprocess.Popen(
            [*prefix, java, f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", *archive, *jvm_options,
             f"-Dlog4j2.configurationFile={conf_dir() / 'log4j2-kafka.properties'}",
             f"-Dkafka.logs.dir={log_dir}", "-cp", classpath, "kafka.Kafka", str(node_dir / "server.properties")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    return proc.pid


def restart(cluster: LocalKafka, heap: str = "512m", timeout_s: float = 90.0) -> LocalKafka:
    """Start again the brokers of ``cluster`` that are no longer running (killed, say), on
    their own ports and data; wait until the whole cluster serves."""
    java = shutil.which("java")
    if java is None:
        raise UsageError("Java 17 is needed to run the local Kafka broker; install a JDK")
    classpath = _classpath(cluster.plugins)
    brokers = []
    for b in cluster.brokers:
        if processes.alive(b.pid):
            brokers.append(b)
            continue
        processes.reap(b.pid)
        pid = _launch(java, classpath, cluster.state_dir / f"broker-{b.node_id}", heap, b.launch)
        brokers.append(replace(b, pid=pid))
    restarted = replace(cluster, brokers=tuple(brokers))
    _write_state(restarted)
    _wait_ready(restarted, timeout_s)
    return restarted


def _classpath(plugins: tuple[Path, ...]) -> str:
    return os.pathsep.join([f"{jars_dir()}/*", *(str(p) for p in plugins)])


def _write_state(cluster: LocalKafka) -> None:
    state = {
        "security": cluster.security,
        "plugins": [str(p) for p in cluster.plugins],
        "ca_file": str(cluster.ca_file) if cluster.ca_file else None,
        "secrets_dir": str(cluster.secrets_dir) if cluster.secrets_dir else None,
        "brokers": [b.__dict__ for b in cluster.brokers],
    }
    (cluster.state_dir / STATE_FILE).write_text(json.dumps(state, indent=2))


def _wait_ready(cluster: LocalKafka, timeout_s: float) -> None:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    for b in cluster.brokers:
        while not _port_open(b.port, b.host):
            if not processes.alive(b.pid):
                raise KafkaUnavailable(
                    f"local Kafka broker {b.node_id} exited at start-up; see {cluster.state_dir}/broker-{b.node_id}/logs"
                )
            if time.monotonic() > deadline:
                raise KafkaUnavailable(
                    f"local Kafka broker {b.node_id} did not open port {b.port} in {timeout_s:.0f} s"
                )
            time.sleep(0.2)
    admin = AdminClient(kafka_security.confluent_settings(cluster, ADMIN))
    while True:
        try:
            md = admin.list_topics(timeout=5)
            if len(md.brokers) == len(cluster.brokers):
                return
        except Exception:  # noqa: BLE001 - not ready yet; the deadline bounds the loop
            pass
        if time.monotonic() > deadline:
            raise KafkaUnavailable(f"local Kafka cluster did not serve metadata in {timeout_s:.0f} s")
        time.sleep(0.3)


def status(state_dir: Path | str) -> LocalKafka | None:
    """The cluster recorded in ``state_dir`` if any of its brokers is still alive."""
    state_dir = Path(state_dir).resolve()
    f = state_dir / STATE_FILE
    if not f.exists():
        return None
    state = json.loads(f.read_text())
    brokers = tuple(Broker(**{**b, "launch": tuple(b.get("launch", ()))}) for b in state["brokers"])
    # A state file written before security was recorded describes a plaintext cluster.
    paths = [Path(state[k]) if state.get(k) else None for k in ("ca_file", "secrets_dir")]
    cluster = LocalKafka(state_dir, brokers, state.get("security", PLAINTEXT), *paths,
                         tuple(Path(p) for p in state.get("plugins", ())))  # fmt: skip
    return cluster if any(cluster.alive()) else None


def stop(state_dir: Path | str) -> bool:
    """Stop the cluster recorded in ``state_dir``; False if none was running."""
    cluster = status(state_dir)
    if cluster is None:
        (Path(state_dir) / STATE_FILE).unlink(missing_ok=True)
        return False
    cluster.stop()
    return True
