"""A lab: Kafka brokers on hosts of their own, each advertised through a delaying proxy, a
Spark master and workers on theirs, and a driver host to run the job from
(``kappa-ingest lab up|down|status|link``).

Everything a lab starts is recorded in ``<state_dir>/lab.json`` and stopped by PID; its
namespaces are removed on ``down`` and on any failure while it comes up.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from kappa_ingest import processes
from kappa_ingest.errors import UsageError
from kappa_ingest.kafka import broker
from kappa_ingest.kafka.broker import HOST_PORT, Host, LocalKafka
from kappa_ingest.lab import net, proxy
from kappa_ingest.lab.net import Net
from kappa_ingest.s3 import server as s3_server
from kappa_ingest.s3.server import LocalS3
from kappa_ingest.spark import cluster as spark_cluster
from kappa_ingest.spark.cluster import SparkCluster

PROXY_PORT = 19092  # where a broker host's proxy listens; clients and brokers reach the broker there
STATE_FILE = "lab.json"
DRIVER = "drv"
MASTER = "m"
STORE = "st"
STORE_PORT = 19000  # where the store host's proxy listens (S3Proxy itself on the next port)


@dataclass
class Lab:
    state_dir: Path
    net: Net
    kafka: LocalKafka
    proxies: dict[str, int]  # a broker's host (or the store's) -> its delaying proxy's pid
    spark: SparkCluster | None = None  # with workers: the master's and workers' hosts

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers

    @property
    def broker_hosts(self) -> list[str]:
        return [h for h in self.proxies if h != STORE]

    def delay(self, host: str, rtt_ms: float, timeout_s: float = 10.0) -> None:
        """The round trip ``host``'s proxy adds from now on (its connections too): returns once
        the proxy applies it (it reads its control file every 0.1 s)."""
        control = _control(self.state_dir, host)
        written = control.with_name(control.name + ".new")
        written.write_text(f"{rtt_ms}\n")
        written.replace(control)  # whole: the proxy never reads it half written
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if float(proxy.applied(control).read_text().strip()) == rtt_ms:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        raise UsageError(f"lab: the proxy of {host} did not take the round trip {rtt_ms} ms in {timeout_s:.0f} s")

    def run(self, host: str, *command: str, **kwargs) -> subprocess.Popen:  # type: ignore[no-untyped-def]
        """Start ``command`` on ``host``."""
        return subprocess.Popen([*self.net.exec(host), *command], **kwargs)


def _control(state_dir: Path, host: str) -> Path:
    return state_dir / f"proxy-{host}.rtt"


def _start_proxy(state_dir: Path, the_net: Net, host: str, listen_port: int, to_port: int, rtt_ms: float) -> int:
    """A delaying proxy on ``host``, from ``listen_port`` to ``to_port`` of its address; its pid."""
    _control(state_dir, host).write_text(f"{rtt_ms}\n")
    address = the_net.hosts[host]
    with open(state_dir / f"proxy-{host}.log", "ab") as log:
        proxy = subprocess.Popen(
            [*the_net.exec(host), sys.executable, "-m", "kappa_ingest.lab.proxy", "--listen",
             f"{address}:{listen_port}", "--to", f"{address}:{to_port}", "--control", str(_control(state_dir, host))],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    return proxy.pid


def add_store(lab: Lab, secret: str | None = None, rtt_ms: float = 0.0) -> LocalS3:
    """An object store on a host of its own (``st``): S3Proxy behind a delaying proxy
    (``lab.delay(STORE, ms)``), reached at ``http://ADDRESS:STORE_PORT``; stopped with the lab."""
    address = lab.net.add(STORE)
    lab.proxies[STORE] = _start_proxy(lab.state_dir, lab.net, STORE, STORE_PORT, STORE_PORT + 1, rtt_ms)
    _save(lab.state_dir, lab.net, lab.proxies)
    with lab.net.inside(STORE):  # S3Proxy's process, and its readiness check, on the store's host
        store = s3_server.start(lab.state_dir / "s3", port=STORE_PORT + 1, secret=secret, host=address)
    return replace(store, port=STORE_PORT)  # clients go through the proxy


# Long: the hosts, proxies, brokers and Spark daemons come up in this order, all undone on failure.
def up(
    state_dir: Path | str,
    brokers: int = 1,
    heap: str = "512m",
    rtt_ms: float = 0.0,
    workers: int = 0,
    worker_cores: int = 1,
    worker_memory: str = "1g",
    lab_id: str | None = None,
) -> Lab:
    """Start a lab: ``brokers`` broker hosts (replication 3 from three on), a driver host,
    and with ``workers`` a Spark master host and that many worker hosts."""
    state_dir = Path(state_dir).resolve()
    if status(state_dir) is not None:
        raise UsageError(f"a lab is already up from {state_dir}: 'kappa-ingest lab down' first")
    state_dir.mkdir(parents=True, exist_ok=True)
    the_net = net.create(lab_id)
    proxies: dict[str, int] = {}
    try:
        hosts = [f"b{i}" for i in range(1, brokers + 1)]
        spark_hosts = [MASTER, *(f"w{i}" for i in range(1, workers + 1))] if workers else []
        for h in [*hosts, *spark_hosts, DRIVER]:
            the_net.add(h)
        for h in hosts:
            proxies[h] = _start_proxy(state_dir, the_net, h, PROXY_PORT, HOST_PORT, rtt_ms)
        _save(state_dir, the_net, proxies)
        replicated = {"default.replication.factor": "3", "min.insync.replicas": "2"} if brokers >= 3 else {}
        places = [Host(the_net.hosts[h], tuple(the_net.exec(h)), PROXY_PORT) for h in hosts]
        spark = None
        with the_net.inside(DRIVER):  # where the brokers and the master are reached from
            kafka = broker.start(state_dir / "kafka", brokers, heap=heap, properties=replicated, hosts=places)
            if workers:
                on = [(the_net.hosts[h], tuple(the_net.exec(h))) for h in spark_hosts]
                spark = spark_cluster.start(state_dir / "spark", workers, worker_cores, worker_memory, hosts=on)
    except BaseException:
        _stop(state_dir, the_net, proxies)
        raise
    return Lab(state_dir, the_net, kafka, proxies, spark)


def _save(state_dir: Path, the_net: Net, proxies: dict[str, int]) -> None:
    state = {"net": the_net.to_json(), "proxies": proxies}
    (state_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def _recorded(state_dir: Path) -> tuple[Net, dict[str, int]] | None:
    """The network and proxy pids ``lab.json`` records, if there is one."""
    f = state_dir / STATE_FILE
    if not f.exists():
        return None
    state = json.loads(f.read_text())
    return Net(state["net"]["lab_id"], state["net"]["hosts"]), {h: int(p) for h, p in state["proxies"].items()}


def status(state_dir: Path | str) -> Lab | None:
    """The lab recorded in ``state_dir`` if its namespaces are still there."""
    state_dir = Path(state_dir).resolve()
    recorded = _recorded(state_dir)
    if recorded is None or not net.namespaces(recorded[0].lab_id):
        return None
    kafka = broker.status(state_dir / "kafka") or LocalKafka(state_dir / "kafka", ())
    the_net, proxies = recorded
    return Lab(state_dir, the_net, kafka, proxies, spark_cluster.status(state_dir / "spark"))


def down(state_dir: Path | str) -> bool:
    """Stop everything the lab runs, by PID, and remove its namespaces; False if none was up."""
    state_dir = Path(state_dir).resolve()
    recorded = _recorded(state_dir)
    if recorded is None:
        return False
    _stop(state_dir, *recorded)
    return True


def discard_data(state_dir: Path | str) -> None:
    """Remove what a stopped lab stored (the brokers' logs of records, the store's objects),
    keeping its settings and its processes' logs: a links bench left 12 GB behind."""
    state_dir = Path(state_dir)
    for data in [*state_dir.glob("kafka/*/data"), state_dir / "s3" / "data"]:
        shutil.rmtree(data, ignore_errors=True)


def _stop(state_dir: Path, the_net: Net, proxies: dict[str, int]) -> None:
    try:
        spark_cluster.stop(state_dir / "spark")
        broker.stop(state_dir / "kafka")
        s3_server.stop(state_dir / "s3")
        processes.stop(list(proxies.values()), 5.0)
    finally:
        net.remove(the_net.lab_id)  # and whatever else still runs in its namespaces
        (state_dir / STATE_FILE).unlink(missing_ok=True)
