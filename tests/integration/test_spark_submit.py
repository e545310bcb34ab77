"""The README's cluster recipe, followed literally against a real Spark standalone cluster:
a master and two workers, the venv packed with ``kappa-ingest pack``, ``./spark-submit.sh
--master spark://... --archives ...#venv jobs/ingest_csv.py ...``, run across hosts of their
own (the suite's cluster lab); and ``kappa-ingest cluster``, which starts such a cluster on
this machine.

Executors here have no C compiler (``CC`` names none) and an empty kappa-ingest cache: the
C record loops must reach them built, in the zip spark-submit.sh ships."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers import cluster_recipe, consume_all, expected_rows, lab_s3_put, rows
from kappa_ingest import datagen, processes
from kappa_ingest.spark import cluster as spark_cluster

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
KI = str(ROOT / ".venv" / "bin" / "kappa-ingest")


def test_the_cluster_command_starts_a_master_and_workers_and_stops_them_by_pid(tmp_path):
    """(The recipe's job itself runs on the cluster lab's master and workers: below.)"""
    state = str(tmp_path / "cluster")
    started = subprocess.run([KI, "cluster", "start", "--dir", state, "--workers", "2", "--worker-cores", "1",
                              "--worker-memory", "768m"], capture_output=True, text=True, timeout=120)  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr
        cluster = spark_cluster.status(state)
        assert cluster is not None and [w["state"] for w in cluster.workers()] == ["ALIVE", "ALIVE"]
        assert cluster.master_url in started.stdout  # what spark-submit.sh --master takes
        status = subprocess.run([KI, "cluster", "status", "--dir", state], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and cluster.master_url in status.stdout, status.stdout
        pids = [d.pid for d in cluster.daemons]
    finally:
        subprocess.run([KI, "cluster", "stop", "--dir", state], timeout=60, check=True)
    assert spark_cluster.status(state) is None and not any(processes.alive(p) for p in pids)


def submit(
    servers: str,
    cluster,
    inputs: str,
    archive: Path,
    tmp_path: Path,
    on: tuple[str, ...] = (),
    driver_host: str = "127.0.0.1",
    job: tuple[str, ...] = (),
) -> dict:
    """spark-submit.sh as the README has it (``on``: the driver's lab host, ``ip netns exec NS``;
    ``job``: more of the job's arguments)."""
    no_compiler = tmp_path / "executor-cache"
    no_compiler.mkdir()
    done = subprocess.run(
        [*on, *cluster_recipe(cluster.master_url, driver_host, archive),
         "--conf", f"spark.executorEnv.KAPPA_INGEST_CACHE={no_compiler}", "--conf", "spark.executorEnv.CC=/no/cc",
         str(ROOT / "jobs" / "ingest_csv.py"), "--input", inputs, "--topic", "on-a-cluster",
         "--bootstrap-servers", servers, "--partitions", "4", "--metrics-dir", str(tmp_path / "m"), *job],
        capture_output=True, text=True, timeout=400, env={**os.environ, "SPARK_LOCAL_IP": driver_host}, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [summary_file] = (tmp_path / "m" / "runs").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["spark_master"] == cluster.master_url and summary["status"] == "succeeded"
    executors = summary["executors"]
    assert len(executors) == 2, executors  # one per worker
    assert sum(e["rows"] for e in executors) == summary["rows_sent"] == 30_000
    assert all(e["rows"] > 0 for e in executors)
    assert [e["record_loops"] for e in executors] == ["C", "C"], [e["warnings"] for e in executors]
    assert list(no_compiler.glob("kappa-ingest-native-*.so")), "executors took the shipped C loops, not a build"
    assert all(c["ok"] for c in summary["checks"]), summary["checks"]
    assert "loops" in done.stdout and "executors" in done.stdout
    return summary


@pytest.mark.faults
def test_the_cluster_recipe_across_hosts_of_their_own(packed_venv, lab_cluster, lab_store, tmp_path):
    """The same recipe in a lab: broker, master, two workers, the driver and the object store
    each on a host (a network namespace) of its own, six addresses. The input is an object
    in the store and nowhere else (its local copy deleted before the run: no worker, and not
    the driver, can read it as a file); every row read back read_committed, as the csv
    module read the file. (The lab is the session's: up once, down at the end, leaving
    nothing behind.)"""
    from kappa_ingest.lab import hosts

    lab = lab_cluster
    path = datagen.generate("wide30", 30_000, tmp_path / "in.csv")
    expected = expected_rows(path)
    uri = lab_s3_put(lab, lab_store, "recipe/in.csv", path)
    path.unlink()
    assert len({lab.net.hosts[h] for h in ("b1", "m", "w1", "w2", "drv", hosts.STORE)}) == 6 and lab.spark is not None
    with lab.net.inside(hosts.DRIVER):
        assert [w["state"] for w in lab.spark.workers()] == ["ALIVE", "ALIVE"]
    drv = lab.net.hosts[hosts.DRIVER]
    summary = submit(lab.bootstrap_servers, lab.spark, uri, packed_venv.path(), tmp_path,
                     tuple(lab.net.exec(hosts.DRIVER)), drv, ("--s3-endpoint", lab_store.endpoint))  # fmt: skip
    assert [f["path"] for f in summary["plan"]["files"]] == [uri] and summary["read_path"] == "lines"
    on_hosts = {e["host"] for e in summary["executors"]}
    assert on_hosts == {lab.net.hosts["w1"], lab.net.hosts["w2"]}, on_hosts  # each executor on its worker's host
    with lab.net.inside(hosts.DRIVER):
        records = consume_all(lab.bootstrap_servers, "on-a-cluster")
    assert rows(records) == expected  # record by record, as the csv module read the file
