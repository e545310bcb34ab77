"""A real Spark standalone cluster on 127.0.0.1: one master and N workers, for trying the
README's cluster recipe (``kappa-ingest cluster start``) and for the test suite.

The pyspark wheel has no ``sbin/start-master.sh``; the daemons are started with its
``spark-class`` as ``org.apache.spark.deploy.master.Master`` and ``...worker.Worker``,
each in its own process group with its log in the state directory, and stopped by the
PIDs recorded in ``<state_dir>/spark-cluster.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kappa_ingest import processes
from kappa_ingest.errors import UsageError
from kappa_ingest.kafka.broker import free_port

STATE_FILE = "spark-cluster.json"
DAEMON_MEMORY = "256m"  # the master's and workers' own JVMs; executors get the worker's --memory


@dataclass(frozen=True)
class Daemon:
    name: str  # master | worker-1 ...
    pid: int
    port: int
    ui_port: int
    host: str = "127.0.0.1"  # a lab host's address (kappa_ingest.lab)
    launch: tuple[str, ...] = ()  # the prefix it runs under (a lab host's `ip netns exec NS`)


LAB_PORTS = {"master": (7077, 8080), "worker": (7078, 8081)}  # a daemon's ports on a lab host of its own


@dataclass(frozen=True)
class SparkCluster:
    state_dir: Path
    daemons: tuple[Daemon, ...]

    @property
    def master_url(self) -> str:
        return f"spark://{self.daemons[0].host}:{self.daemons[0].port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.daemons[0].host}:{self.daemons[0].ui_port}"

    def alive(self) -> dict[str, bool]:
        return {d.name: processes.alive(d.pid) for d in self.daemons}

    def workers(self) -> list[dict]:
        """The master's view of its workers (its ``/json`` page): id, state, cores, memory."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as r:
            return json.load(r)["workers"]

    def stop(self, timeout_s: float = 20.0) -> None:
        """Workers first (their executors with them), then the master: SIGTERM, then SIGKILL."""
        processes.stop([d.pid for d in reversed(self.daemons)], timeout_s)
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)


def spark_class() -> str:
    """The pyspark wheel's ``spark-class``, beside this Python."""
    import sys

    found = Path(sys.executable).parent / "spark-class"
    if not found.exists():
        raise UsageError(f"no spark-class beside {sys.executable}: install pyspark (make setup)")
    return str(found)


def _launch(state_dir: Path, name: str, args: list[str], host: str = "127.0.0.1", prefix: tuple[str, ...] = ()) -> int:
    log_dir = state_dir / name
    log_dir.mkdir(parents=True, exist_ok=True)
    import pyspark

    # SPARK_HOME given: spark-class would find it with whichever python3 is first on PATH.
    env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
           "SPARK_LOCAL_IP": host, "SPARK_LOG_DIR": str(log_dir)}  # fmt: skip
    with open(log_dir / f"{name}.log", "ab") as out:
        proc = subprocess.Popen([*prefix, spark_class(), *args], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)  # fmt: skip
    return proc.pid


# Long: a cluster's start is an order of steps (master, workers, wait) with cleanup on failure.
def start(
    state_dir: Path | str,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    timeout_s: float = 60.0,
    hosts: list[tuple[str, tuple[str, ...]]] | None = None,
) -> SparkCluster:
    """Start a master and ``workers`` workers (each with ``cores`` cores and ``memory`` for
    executors) on 127.0.0.1; return once the master lists every worker alive. ``hosts``:
    the master's and each worker's lab host (address, ``ip netns exec`` prefix); the caller
    waits from where those addresses are reached."""
    state_dir = Path(state_dir).resolve()
    if (running := status(state_dir)) is not None:
        raise UsageError(f"a Spark cluster is already running from {state_dir} at {running.master_url};"
                         " stop it first with 'kappa-ingest cluster stop'")  # fmt: skip
    if shutil.which("java") is None:
        raise UsageError("Java 17 is needed to run a Spark cluster; install a JDK")
    places = hosts or [("127.0.0.1", ())] * (workers + 1)
    host, prefix = places[0]
    port, ui = LAB_PORTS["master"] if hosts else (free_port(), free_port())
    daemons = [Daemon("master", _launch(state_dir, "master", [
        "org.apache.spark.deploy.master.Master", "--host", host, "--port", str(port), "--webui-port", str(ui),
    ], host, prefix), port, ui, host, prefix)]  # fmt: skip
    cluster = SparkCluster(state_dir, tuple(daemons))
    try:
        _write_state(cluster)
        for i in range(1, workers + 1):
            name, (host, prefix) = f"worker-{i}", places[i]
            wport, wui = LAB_PORTS["worker"] if hosts else (free_port(), free_port())
            pid = _launch(state_dir, name, [
                "org.apache.spark.deploy.worker.Worker", "--host", host, "--port", str(wport),
                "--webui-port", str(wui), "--cores", str(cores), "--memory", memory,
                "--work-dir", str(state_dir / name / "work"), cluster.master_url,
            ], host, prefix)  # fmt: skip
            daemons.append(Daemon(name, pid, wport, wui, host, prefix))
            cluster = SparkCluster(state_dir, tuple(daemons))
            _write_state(cluster)
        _wait_ready(cluster, workers, timeout_s)
    except BaseException:
        cluster.stop(timeout_s=5)
        raise
    return cluster


def _wait_ready(cluster: SparkCluster, workers: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        dead = [d.name for d in cluster.daemons if not processes.alive(d.pid)]
        if dead:
            raise UsageError(f"Spark {dead[0]} exited at start-up; see {cluster.state_dir / dead[0]}")
        try:
            if sum(w["state"] == "ALIVE" for w in cluster.workers()) == workers:
                return
        except (OSError, ValueError):  # not up yet, or its page before the /json/ handler is attached (seen in CI)
            pass  # the deadline bounds the loop
        if time.monotonic() > deadline:
            raise UsageError(f"the Spark cluster did not list {workers} workers in {timeout_s:.0f} s;"
                             f" see the logs in {cluster.state_dir}")  # fmt: skip
        time.sleep(0.3)


def _write_state(cluster: SparkCluster) -> None:
    (cluster.state_dir / STATE_FILE).write_text(json.dumps({"daemons": [d.__dict__ for d in cluster.daemons]}))


def status(state_dir: Path | str) -> SparkCluster | None:
    """The cluster recorded in ``state_dir`` if any of its daemons is still alive."""
    f = Path(state_dir).resolve() / STATE_FILE
    if not f.exists():
        return None
    daemons = json.loads(f.read_text())["daemons"]
    cluster = SparkCluster(
        Path(state_dir).resolve(), tuple(Daemon(**{**d, "launch": tuple(d.get("launch", ()))}) for d in daemons)
    )
    return cluster if any(cluster.alive().values()) else None


def stop(state_dir: Path | str) -> bool:
    """Stop the cluster recorded in ``state_dir``; False if none was running."""
    cluster = status(state_dir)
    if cluster is None:
        (Path(state_dir) / STATE_FILE).unlink(missing_ok=True)
        return False
    cluster.stop()
    return True
