"""Shared fixtures: one small Spark session and one real KRaft broker for the whole run,
the suite's other brokers, the packed venv, and the labs of hosts, each made once when a
test first needs it and stopped, by PID, as soon as no test left needs it (an idle KRaft
broker costs some 4% of a core: the suite's tests are ordered so that each shared one's
tests run together, below)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_STOP_WHEN_DONE: dict[str, object] = {}  # fixture name -> stops what it started, once


def _stop_when_done(name: str, stop) -> object:
    """``stop`` once no test left in the session needs fixture ``name`` (or at the session's end)."""
    done: list[bool] = []

    def once() -> None:
        if not done:
            done.append(True)
            stop()

    _STOP_WHEN_DONE[name] = once
    return once


os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))

# The suite's S3 key pair, in a shared credentials file named in the environment before any
# JVM starts: the shared session's Python workers (forked from its JVM) find it by the
# standard AWS chain, as a cluster's executors would in theirs. (Not AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY: Spark copies those into its Hadoop settings, asking the host's own
# name as it does, which a host of its own cannot resolve.) The secret is distinctive, so
# that a test can look for it in whatever a run writes. No SDK may look for an instance role.
from helpers import S3_SECRET, s3_filesystem  # noqa: E402 - tests/ is on the path from the line above


def _aws_credentials_file() -> str:
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="kappa-aws-")
    atexit.register(shutil.rmtree, folder, True)
    path = Path(folder) / "credentials"
    path.touch(mode=0o600)
    path.write_text(f"[default]\naws_access_key_id = kappa-local\naws_secret_access_key = {S3_SECRET}\n")
    return str(path)


for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
    os.environ.pop(_name, None)
os.environ.update({"AWS_SHARED_CREDENTIALS_FILE": _aws_credentials_file(), "AWS_REGION": "us-east-1",
                   "AWS_EC2_METADATA_DISABLED": "true"})  # fmt: skip


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from kappa_ingest.report.store import SPARK_READER_CONF
    from kappa_ingest.spark.session import build_session

    session = build_session(
        "kappa-ingest tests",
        "local[2]",
        # The Delta reader too: the suite reads the metrics store with Spark as well as with deltalake.
        # The event log: the secrets test reads it for passwords.
        extra_conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g", **SPARK_READER_CONF,
                    "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(tmp_path_factory.mktemp("eventlog")),
                    "spark.eventLog.buffer.kb": "1k"},
        # The quick compiler only, as the command line has it for inputs under 1 GB: for the
        # suite's many small jobs the driver JVM spends half the CPU so (tests/integration/
        # test_ingest_sinks.py alone: 36.7 -> 18.5 CPU-s in the JVM, 43 -> 35 s).
        quick_jit=True,
    )  # fmt: skip
    stop = _stop_when_done("spark", session.stop)  # an idle session's JVM and workers still cost CPU
    yield session
    stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    from kappa_ingest.kafka import broker as local_kafka

    cluster = local_kafka.start(tmp_path_factory.mktemp("kafka"), brokers=1, properties=KEEP_OLD_RECORDS)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A real S3 server (S3Proxy) checking signatures against the suite's key pair, with
    a bucket ``landing``; objects are put through its S3 API (``s3_put``)."""
    from kappa_ingest.s3 import server

    store = server.start(tmp_path_factory.mktemp("s3"), secret=S3_SECRET)
    stop = _stop_when_done("s3", store.stop)
    s3_filesystem(store).create_dir("landing")
    yield store
    stop()


@pytest.fixture(scope="session")
def kafka_stock(tmp_path_factory):
    """A broker on Kafka's own defaults, as a new user runs one: topics are created when a
    client first names them (auto.create.topics.enable), with 4 partitions here
    (num.partitions) so that a topic created so shows."""
    from kappa_ingest.kafka import broker as local_kafka

    cluster = local_kafka.start(tmp_path_factory.mktemp("kafka-stock"), brokers=1, stock=True,
                                properties={"num.partitions": "4"})  # fmt: skip
    stop = _stop_when_done("kafka_stock", cluster.stop)
    yield cluster
    stop()


# Records timestamped by event time (2012 in the DEBS layout) are older than Kafka's default
# retention of 7 days: the broker would delete them, at its next retention check, before a test reads them.
KEEP_OLD_RECORDS = {"log.retention.ms": "-1"}
# A broker is declared dead after 4 s without heartbeats (Kafka's default: 9 s), so leaders move quickly.
FAST_FAILOVER = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500", **KEEP_OLD_RECORDS}


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory):
    """A real three-broker KRaft cluster (combined brokers and controllers, static voters),
    shared by the tests that need replication or kill brokers of it; stopped by PID."""
    from kappa_ingest.kafka import broker as local_kafka

    state = tmp_path_factory.mktemp("kafka3")
    cluster = ClusterHolder(local_kafka.start(state, brokers=3, properties=FAST_FAILOVER))

    def stop_cluster() -> None:
        # Stopped together, the last brokers' controlled shutdown waits for a quorum that is gone
        # (up to the 30 s before SIGKILL): nothing of this cluster is kept, so wait 5 s at most.
        cluster.now.stop(timeout_s=5)
        if any(cluster.now.alive()) or local_kafka.status(state) is not None:
            raise RuntimeError(f"brokers of {state} outlived stop()")

    stop = _stop_when_done("kafka3", stop_cluster)
    yield cluster
    stop()


class ClusterHolder:
    """The three-broker cluster as it is now: a test that kills brokers restarts them (heal)."""

    def __init__(self, cluster) -> None:
        self.now = cluster

    @property
    def bootstrap_servers(self) -> str:
        return self.now.bootstrap_servers

    def heal(self) -> None:
        import signal

        from kappa_ingest.kafka import broker as local_kafka

        for b in self.now.brokers:
            try:
                os.kill(b.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.now = local_kafka.restart(self.now)


@pytest.fixture
def cluster(kafka3):
    return Brokers(kafka3)


class Brokers:
    """The session's three-broker cluster, as the fault tests use it."""

    def __init__(self, holder) -> None:
        self.holder = holder

    @property
    def now(self):
        return self.holder.now

    @property
    def bootstrap_servers(self) -> str:
        return self.holder.bootstrap_servers

    def heal(self) -> None:
        self.holder.heal()

    def broker_leading(self, topic: str, partition: int = 0):
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap_servers}).list_topics(topic, timeout=10)
        leader = md.topics[topic].partitions[partition].leader
        return next(b for b in self.now.brokers if b.node_id == leader)

    def topic(self, name: str) -> str:
        """A topic on every broker, two of them in sync for a write to count (acks=all)."""
        from kappa_ingest.kafka.topics import Admin

        with Admin(self.bootstrap_servers) as admin:
            admin.ensure_topic(name, 3, 3, {"min.insync.replicas": "2"})
        return name


class PackedVenv:
    """``kappa-ingest pack``, started once: the archive executors run from (``--archives``)."""

    def __init__(self, directory: Path) -> None:
        self.archive = directory / "kappa-venv.tar.gz"
        ki = str(Path(sys.executable).parent / "kappa-ingest")
        self._packing = subprocess.Popen([ki, "pack", "--out", str(self.archive)], stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)  # fmt: skip

    def path(self) -> Path:
        """The archive, once packed."""
        _, err = self._packing.communicate(timeout=600)
        assert self._packing.returncode == 0, err[-2000:]
        return self.archive

    def close(self) -> None:
        if self._packing.poll() is None:
            self._packing.kill()
            self._packing.wait(30)


@pytest.fixture(scope="session")
def packed_venv(tmp_path_factory):
    """The venv packed once for every test that submits to a cluster (packing while the
    first of them brings its cluster up: name it before the lab)."""
    packed = PackedVenv(tmp_path_factory.mktemp("packed"))
    yield packed
    packed.close()


def _lab(tmp_path_factory, name: str, fixture: str, **shape):
    """A lab of hosts, up until its last test; then down, leaving nothing behind."""
    from kappa_ingest import processes
    from kappa_ingest.lab import hosts, net

    state = tmp_path_factory.mktemp(name) / "lab"
    lab = hosts.up(state, **shape)
    pids = [*lab.proxies.values(), *(b.pid for b in lab.kafka.brokers)]

    def down() -> None:
        assert hosts.down(state)
        assert net.namespaces(lab.net.lab_id) == [], "namespaces of the lab left behind"
        assert not any(processes.alive(p) for p in pids), "processes of the lab left behind"

    stop = _stop_when_done(fixture, down)
    yield lab
    stop()


@pytest.fixture(scope="session")
def lab_one_broker(tmp_path_factory):
    """A broker host behind its delaying proxy, and a driver host."""
    yield from _lab(tmp_path_factory, "lab-one-broker", "lab_one_broker", brokers=1)


@pytest.fixture(scope="session")
def lab_cluster(tmp_path_factory):
    """A broker host, a Spark master host, two worker hosts and a driver host."""
    yield from _lab(tmp_path_factory, "lab-cluster", "lab_cluster", brokers=1, workers=2, worker_memory="768m")


@pytest.fixture(scope="session")
def lab_store(lab_cluster):
    """The cluster lab's object store: S3Proxy on a host of its own (``st``) behind its
    delaying proxy, checking the suite's key pair; down with the lab."""
    from kappa_ingest.lab import hosts

    return hosts.add_store(lab_cluster, secret=S3_SECRET)


@pytest.fixture
def lab(lab_one_broker):
    """The one-broker lab as a test finds it: whatever links the test cut or slowed come back after."""
    yield lab_one_broker
    lab_one_broker.net.restore("b1")
    lab_one_broker.delay("b1", 0)


# The order of the suite: first what needs none of the brokers and labs that only some tests
# share, then each of those by its tests, so that it stops after them; the fault and lab
# tests (which kill, pause and cut real processes) after the rest. Of the tests on the
# cluster lab, the one that cuts a worker off (and leaves it to find its way back to the
# master) last; the one that ships the packed venv first (packing while its lab comes up).
_LAST_ON_THE_CLUSTER_LAB = "test_a_worker_cut_off_from_the_driver_while_its_executor_sends_delivers_every_row_once"
_FIRST_ON_THE_CLUSTER_LAB = "test_the_cluster_recipe_across_hosts_of_their_own"


def _place(item) -> tuple:
    needs = set(item.fixturenames)
    fault = item.get_closest_marker("faults") is not None
    if "s3" in needs and not fault:
        group = 0.5
    elif "kafka_stock" in needs:
        group = 1
    elif "kafka3" in needs:
        group = 2
    elif not fault:
        group = 0
    elif "lab_one_broker" in needs:
        group = 3
    elif "lab_cluster" in needs:
        group = 4
    else:
        group = 5
    return group, item.name == _LAST_ON_THE_CLUSTER_LAB, item.name != _FIRST_ON_THE_CLUSTER_LAB


def _half(item) -> int:
    """``make test`` runs the suite as two pytest processes side by side (one alone leaves a
    core idle ~40% of the time: brokers and JVMs starting, leases and timeouts running out).
    The first: every test that faults nothing, and test_faults.py's faults on one broker
    but one; the second: the other faults (the labs, the three brokers, the exactly-once
    recoveries and zombies, a driver killed). Balanced by the time each took
    (build/test-artifacts/test-times-*.tsv: the second half ended 2 minutes first)."""
    needs = set(item.fixturenames)
    fault = item.get_closest_marker("faults") is not None
    moved = item.name == "test_a_driver_killed_mid_run_is_completed_by_resume[exactly-once]"
    alone = item.module.__name__.endswith("test_faults") and "kafka3" not in needs and not moved
    return 2 if (fault and not alone) or needs & {"kafka3", "lab_one_broker", "lab_cluster"} else 1


def pytest_addoption(parser):
    parser.addoption("--half", type=int, choices=(1, 2), help="only this half of the suite (see _half)")


def pytest_collection_modifyitems(config, items):
    half = config.getoption("--half")
    if half:
        other = [it for it in items if _half(it) != half]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [it for it in items if _half(it) == half]
    items.sort(key=_place)


class _Successors:
    """The fixtures the tests after each test need (the session's final order)."""

    def __init__(self, items) -> None:
        self.place = {it.nodeid: i for i, it in enumerate(items)}
        self.after: list[set[str]] = [set() for _ in range(len(items) + 1)]
        for i in range(len(items) - 1, -1, -1):
            self.after[i] = self.after[i + 1] | set(items[i].fixturenames)

    def needed_after(self, item) -> set[str]:
        return self.after[self.place[item.nodeid] + 1]


_SUCCESSORS: list[_Successors] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test, stop the shared things no test left needs."""
    yield
    if not _STOP_WHEN_DONE or hasattr(item.config, "workerinput"):  # (under xdist a worker cannot tell)
        return
    if not _SUCCESSORS:
        _SUCCESSORS.append(_Successors(item.session.items))
    needed = _SUCCESSORS[0].needed_after(item)
    for name in [n for n in _STOP_WHEN_DONE if n not in needed]:
        _STOP_WHEN_DONE.pop(name)()


_ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "test-artifacts"


def _times(config) -> Path:
    return _ARTIFACTS / f"test-times-{config.getoption('--half') or 'all'}.tsv"


def _busy_cpu_s() -> float:
    """The machine's busy CPU seconds so far (all processes: a test's brokers, JVMs and
    orphans too, which no rusage of the test's children would count)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test's wall time (set-up to teardown) and the machine's CPU in it, one line each
    in build/test-artifacts/test-times-*.tsv: where the suite's time goes, and how much of it
    the CPU was busy."""
    import time

    start, cpu = time.monotonic(), _busy_cpu_s()
    yield
    wall, busy = time.monotonic() - start, _busy_cpu_s() - cpu
    times = _times(item.config)
    times.parent.mkdir(parents=True, exist_ok=True)
    with times.open("a") as out:
        out.write(f"{item.nodeid}\t{wall:.2f}\t{busy:.2f}\t{_place(item)[0]}\n")


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        _times(session.config).unlink(missing_ok=True)
