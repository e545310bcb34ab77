"""The lab: a broker on a host of its own behind its delaying proxy, the job run from a
driver host, a link cut and restored, and nothing left behind (namespaces, processes)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

import faults
from helpers import cluster_recipe, consume_all, expected_rows, iso_ms_to_epoch, lab_s3_put, rows
from kappa_ingest import datagen, failpoints, processes
from kappa_ingest.config.choices import DEFAULT_LEDGER_TOPIC
from kappa_ingest.delivery import ledger
from kappa_ingest.errors import KafkaUnavailable
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.lab import hosts, net

pytestmark = [pytest.mark.integration, pytest.mark.faults]
ROWS = 20_000


def _metadata_ms(lab: hosts.Lab, timeout_s: float) -> float:
    """One metadata round trip from the driver host, a new client each time."""
    with lab.net.inside(hosts.DRIVER):
        admin = AdminClient({"bootstrap.servers": lab.bootstrap_servers})
        start = time.monotonic()
        admin.list_topics(timeout=timeout_s)
        return (time.monotonic() - start) * 1000


def test_a_run_from_the_driver_host_sends_every_row_once_through_the_brokers_proxy(lab, tmp_path):
    """(The lab comes up for the session and goes down at its end, leaving nothing behind: conftest.)"""
    data = datagen.generate("wide30", ROWS, tmp_path / "in.csv")
    lab.delay("b1", 2)
    pids = [*lab.proxies.values(), *(b.pid for b in lab.kafka.brokers)]
    assert lab.bootstrap_servers == f"{lab.net.hosts['b1']}:{hosts.PROXY_PORT}"
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    run = lab.run(
        hosts.DRIVER, cli, "ingest", "--input", str(data), "--topic", "lab", "--bootstrap-servers",
        lab.bootstrap_servers, "--master", "local[2]", "--metrics-dir", str(tmp_path / "m"), "--run-id", "lab-run",
        "--quiet", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )  # fmt: skip
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out[-3000:]
    report = json.loads((tmp_path / "m" / "runs" / "lab-run" / "summary.json").read_text())
    assert report["bootstrap_servers"] == lab.bootstrap_servers and report["status"] == "succeeded"
    faults.assert_c_loops(report)
    with lab.net.inside(hosts.DRIVER):
        records = consume_all(lab.bootstrap_servers, "lab")
    assert rows(records) == expected_rows(data)  # every row once, as the csv module reads the file
    # The proxy's delay is the link's, changed while it runs (delay() returns once the proxy
    # applies it); a cut link is a partition. A delay shows as a lower bound only: the round
    # trip of a metadata request (several, with connecting) is at least the delay.
    lab.delay("b1", 400)
    assert _metadata_ms(lab, 10) >= 400
    lab.net.cut("b1")
    with pytest.raises(KafkaException):  # librdkafka's timeout: nobody answers
        _metadata_ms(lab, 2)
    assert all(processes.alive(p) for p in pids), "a cut host runs on"
    lab.net.restore("b1")
    assert _metadata_ms(lab, 20) >= 400


def test_a_lab_that_fails_to_come_up_leaves_nothing_behind(tmp_path):
    lab_id = secrets.token_hex(2)  # its own: other labs may come and go meanwhile
    with pytest.raises(KafkaUnavailable):
        hosts.up(tmp_path / "lab", brokers=1, heap="1x", lab_id=lab_id)  # no JVM takes that heap
    assert net.namespaces(lab_id) == [], "namespaces of the failed lab left behind"
    assert not (tmp_path / "lab" / hosts.STATE_FILE).exists()


def test_the_lab_command_brings_hosts_up_shapes_a_link_and_takes_them_down(tmp_path):
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    lab_dir = str(tmp_path / "lab")

    def lab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([cli, "lab", *args, "--dir", lab_dir], capture_output=True, text=True, timeout=180)

    up = lab("up")
    try:
        assert up.returncode == 0, up.stderr
        assert "lab up: Kafka at 10.77.0.1:19092" in up.stdout and "ip netns exec kl-" in up.stdout
        state = hosts.status(lab_dir)
        assert state is not None and sorted(state.net.hosts) == ["b1", "drv"]
        assert lab("link", "b1", "--rtt-ms", "30", "--rate", "100mbit").returncode == 0
        assert (Path(lab_dir) / "proxy-b1.rtt").read_text().strip() == "30.0"
        shaped = subprocess.run(["tc", "-n", state.net.ns("b1"), "qdisc", "show", "dev", "eth0"],
                                capture_output=True, text=True).stdout  # fmt: skip
        assert "tbf" in shaped and "100Mbit" in shaped
        wrong = lab("link", "drv", "--rtt-ms", "30")
        assert wrong.returncode == 2 and "delay is a proxied host's" in wrong.stderr
        status = lab("status")
        assert status.returncode == 0 and "brokers alive [True]" in status.stdout
    finally:
        down = lab("down")
    assert down.returncode == 0 and "lab down" in down.stdout
    assert lab("status").returncode == 1 and net.namespaces(state.net.lab_id) == []


def test_the_coordinators_broker_cut_off_at_commit_time_has_the_commit_retried_not_the_task(lab, tmp_path):
    """The only broker (the transaction coordinator, every partition's leader) is cut off
    while a unit commits, alive, unreachable, until the commit call has timed out (Kafka's
    calls wait at most delivery.timeout.ms, 5 s here) and the task is about to call it again
    (its fault point). The timeout is retriable: the commit is called again once the link is
    back, and the task is not run again."""
    path = datagen.generate("wide30", 20_000, tmp_path / "in.csv", seed=4)
    held, log, metrics = tmp_path / "held", tmp_path / "run.log", tmp_path / "m"
    held.mkdir()
    proc = faults.cli("--input", str(path), "--topic", "cut-commit", "--bootstrap-servers", lab.bootstrap_servers,
                      "--master", "local[2]", "--partitions", "1", "--run-id", "cut-commit", "--metrics-dir",
                      str(metrics), "--kafka-opt", "delivery.timeout.ms=5000", "--quiet", log=log,
                      env={failpoints.ENV: f"{failpoints.BEFORE_COMMIT},{failpoints.COMMIT_RETRY}:{held}"},
                      on=lab.net.exec(hosts.DRIVER))  # fmt: skip
    try:
        faults.wait_for(lambda: list(held.glob(f"*.{failpoints.BEFORE_COMMIT}")), 180, "the task about to commit",
                        proc, log)  # fmt: skip
        lab.net.cut("b1")
        try:
            for marker in held.glob(f"*.{failpoints.BEFORE_COMMIT}"):
                marker.unlink()  # the commit goes ahead, into the cut link
            faults.wait_for(lambda: list(held.glob(f"*.{failpoints.COMMIT_RETRY}")), 120,
                            "the commit timed out, to be retried", proc, log)  # fmt: skip
        finally:
            lab.net.restore("b1")
        for marker in held.glob(f"*.{failpoints.COMMIT_RETRY}"):
            marker.unlink()
        assert proc.wait(180) == 0, log.read_text()[-3000:]
    finally:
        faults.stop_group(proc)
    report = faults.summary(metrics, "cut-commit")
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert not report["duplicates"]["failed_attempts"], "the task was run again"
    assert report["delivery"]["commit_retries"] >= 1, report["delivery"]
    assert report["delivery"]["transactions_committed"] == 1 and report["delivery"]["transactions_aborted"] == 0
    faults.assert_c_loops(report)
    with lab.net.inside(hosts.DRIVER):
        records = consume_all(lab.bootstrap_servers, "cut-commit")
    faults.assert_delivered(records, expected_rows(path), [report])


def _wait_sending(lab: hosts.Lab, topic: str, rows: int, proc: subprocess.Popen, log: Path) -> None:
    """Until ``rows`` records of ``topic`` are in the broker, seen from the driver host."""

    def sending() -> bool:
        with lab.net.inside(hosts.DRIVER):
            return faults.sent_so_far(lab.bootstrap_servers, topic) >= rows

    faults.wait_for(sending, 240, "sending", proc, log)


def _resume(on: list[str], run_id: str, new_id: str, metrics: Path) -> dict:
    """``--resume run_id`` from the host ``on`` runs, as a user would; its report."""
    resumed = subprocess.run([*on, sys.executable, "-m", "kappa_ingest.cli", "ingest", "--resume", run_id, "--run-id",
                              new_id, "--metrics-dir", str(metrics), "--quiet"], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return faults.summary(metrics, new_id)


def test_a_link_cut_longer_than_the_delivery_timeout_ends_in_exit_4_and_resume_completes_it(lab, tmp_path):
    """The only broker's link cut mid-send for longer than delivery.timeout.ms (5 s here):
    the records in flight time out and the run fails with exit 4, its line naming them and
    the --resume that finishes it; once the link is back, --resume does, every row once.
    (A cut shorter than delivery.timeout.ms is absorbed: the test below.)"""
    rows_in = 40_000
    path = datagen.generate("wide30", rows_in, tmp_path / "in.csv", seed=13)
    log, metrics = tmp_path / "run.log", tmp_path / "m"
    on = lab.net.exec(hosts.DRIVER)
    proc = faults.cli("--input", str(path), "--topic", "link-cut", "--bootstrap-servers", lab.bootstrap_servers,
                      "--master", "local[2]", "--partitions", "2", "--target-rate", "4000", "--run-id", "link-cut",
                      "--metrics-dir", str(metrics), "--kafka-opt", "delivery.timeout.ms=5000", "--quiet",
                      log=log, on=on)  # fmt: skip
    try:
        _wait_sending(lab, "link-cut", 4000, proc, log)
        with lab.net.inside(hosts.DRIVER):
            faults.landed_mid_send(lab.bootstrap_servers, ["link-cut"], rows_in)
        lab.net.cut("b1")
        code = proc.wait(180)
    finally:
        faults.stop_group(proc)
        lab.net.restore("b1")
    assert code == 4, log.read_text()[-3000:]
    [line] = faults.error_lines(log)
    assert "not acknowledged by Kafka" in line and "delivery.timeout.ms" in line and "--resume link-cut" in line, line
    reports = [faults.summary(metrics, "link-cut"), _resume(on, "link-cut", "link-cut-2", metrics)]
    faults.assert_c_loops(reports[-1])  # (a failed run's report has no executors' table)
    with lab.net.inside(hosts.DRIVER):
        records = consume_all(lab.bootstrap_servers, "link-cut")
    faults.assert_delivered(records, expected_rows(path), reports)
    print(f"link cut past delivery.timeout.ms: {line}")


def test_a_link_cut_shorter_than_the_delivery_timeout_is_absorbed_every_row_once(lab, tmp_path):
    """The only broker's link cut mid-send for three request timeouts (2 s each) and back,
    well within delivery.timeout.ms (60 s): the requests in flight time out and are sent
    again once the link is back; the run succeeds, every row once. The topic stamps records
    as the broker appends them (LogAppendTime): records made before the link came back were
    appended after it, so the cut held them up."""
    rows_in, cut_s = 40_000, 6.0
    path = datagen.generate("wide30", rows_in, tmp_path / "in.csv", seed=14)
    log, metrics = tmp_path / "run.log", tmp_path / "m"
    with lab.net.inside(hosts.DRIVER), Admin(lab.bootstrap_servers) as admin:
        admin.ensure_topic("short-cut", 2, 1, {"message.timestamp.type": "LogAppendTime"})
    proc = faults.cli("--input", str(path), "--topic", "short-cut", "--bootstrap-servers", lab.bootstrap_servers,
                      "--master", "local[2]", "--partitions", "2", "--target-rate", "4000", "--run-id", "short-cut",
                      "--metrics-dir", str(metrics), "--kafka-opt", "delivery.timeout.ms=60000",
                      "--kafka-opt", "request.timeout.ms=2000", "--quiet", log=log, on=lab.net.exec(hosts.DRIVER))  # fmt: skip
    try:
        _wait_sending(lab, "short-cut", 4000, proc, log)
        with lab.net.inside(hosts.DRIVER):
            faults.landed_mid_send(lab.bootstrap_servers, ["short-cut"], rows_in)
        lab.net.cut("b1")
        try:
            time.sleep(cut_s)  # the fault itself: a cut of this length (what follows waits for conditions)
        finally:
            lab.net.restore("b1")
        restored_ms = time.time_ns() // 1_000_000
        code = proc.wait(180)
    finally:
        faults.stop_group(proc)
    assert code == 0, log.read_text()[-3000:]
    report = faults.summary(metrics, "short-cut")
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert not report["duplicates"]["failed_attempts"], "a task was run again"
    faults.assert_c_loops(report)
    with lab.net.inside(hosts.DRIVER):
        records = consume_all(lab.bootstrap_servers, "short-cut")
    held_up = [r for r in records if iso_ms_to_epoch(r.value["ingest_ts"]) < restored_ms <= r.timestamp_ms]
    assert held_up, "no record made before the link came back was appended after it"
    faults.assert_delivered(records, expected_rows(path), [report])


def _leaders(lab: hosts.Lab, topic: str) -> dict[int, str]:
    """Each partition's leader, as the lab host it runs on."""
    by_node = {b.node_id: h for b, h in zip(lab.kafka.brokers, lab.broker_hosts, strict=True)}
    with lab.net.inside(hosts.DRIVER):
        md = AdminClient({"bootstrap.servers": lab.bootstrap_servers}).list_topics(topic, timeout=10)
    return {p: by_node[m.leader] for p, m in md.topics[topic].partitions.items()}


def test_a_partition_leader_cut_off_from_the_workers_mid_run_ends_exactly_once(tmp_path):
    """Three brokers (replication 3, min.insync.replicas 2); the job runs on the driver host
    (local master: its executors are there). Mid-send, one data partition's leader is cut off
    from that host, not from the other brokers: it stays leader, alive and in sync, and the
    producers cannot reach it. The run fails cleanly (exit 4: its records for that leader
    not acknowledged within delivery.timeout.ms) and --resume, the link back, completes it
    exactly once."""
    rows_in = 24_000
    path = datagen.generate("wide30", rows_in, tmp_path / "in.csv", seed=9)
    log, metrics = tmp_path / "run.log", tmp_path / "m"
    lab = hosts.up(tmp_path / "lab", brokers=3)
    on = lab.net.exec(hosts.DRIVER)
    cut = None
    try:
        proc = faults.cli("--input", str(path), "--topic", "leader-cut", "--bootstrap-servers", lab.bootstrap_servers,
                          "--master", "local[2]", "--partitions", "2", "--topic-partitions", "3",
                          "--replication-factor", "3", "--target-rate", "4000", "--run-id", "leader-cut",
                          "--metrics-dir", str(metrics), "--kafka-opt", "delivery.timeout.ms=5000", "--quiet",
                          log=log, on=on)  # fmt: skip
        try:
            _wait_sending(lab, "leader-cut", 4000, proc, log)
            ledger_leader = _leaders(lab, "_kappa_ingest_ledger")[0]
            cut = next(h for h in _leaders(lab, "leader-cut").values() if h != ledger_leader)
            with lab.net.inside(hosts.DRIVER):  # records sent (not all committed: a unit commits at its end)
                sent = faults.sent_so_far(lab.bootstrap_servers, "leader-cut")
                faults.landed_mid_send(lab.bootstrap_servers, ["leader-cut"], rows_in)
            lab.net.cut_between(cut, hosts.DRIVER)
            code = proc.wait(240)
        finally:
            faults.stop_group(proc)
            if cut:
                lab.net.restore_between(cut, hosts.DRIVER)
        first = faults.summary(metrics, "leader-cut")
        # The records for the cut-off leader time out (delivery.timeout.ms): the run fails cleanly.
        assert code == 4, log.read_text()[-3000:]
        assert "Kafka" in first["error"] and first["status"] == "failed", first["error"]
        reports = [first, _resume(on, "leader-cut", "leader-cut-2", metrics)]
        assert reports[-1]["status"] == "succeeded", reports[-1]["error"]
        faults.assert_c_loops(reports[-1])  # (a failed run's report has no executors' table)
        with lab.net.inside(hosts.DRIVER):
            records = consume_all(lab.bootstrap_servers, "leader-cut")
        faults.assert_delivered(records, expected_rows(path), reports)
        assert sent >= 4000
        print(f"leader {cut} cut from the workers' host: exit {code}, runs {[r['run_id'] for r in reports]}")
    finally:
        hosts.down(tmp_path / "lab")


def _executor_pids(lab: hosts.Lab, host: str) -> list[int]:
    """The Spark executor JVMs running on a lab host."""
    pids = subprocess.run(["ip", "netns", "pids", lab.net.ns(host)], capture_output=True, text=True).stdout.split()
    out = []
    for pid in pids:
        try:
            if "CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_text():
                out.append(int(pid))
        except OSError:
            pass
    return out


def _submit(lab: hosts.Lab, log: Path, *job: str, conf: tuple[str, ...] = ()) -> subprocess.Popen:
    """The README's cluster recipe from the driver host: spark-submit.sh to the lab's master,
    two one-core executors running the venv from the shared disk (the archive is the recipe
    test's), the job's arguments ``job`` (and Spark settings ``conf``).
    Executors are given up 12 s after their last heartbeat (Spark's default: 120 s)."""
    assert lab.spark is not None
    drv = lab.net.hosts[hosts.DRIVER]
    root = Path(__file__).resolve().parents[2]
    with open(log, "wb") as out:
        return lab.run(
            hosts.DRIVER, *cluster_recipe(lab.spark.master_url, drv, None),
            "--conf", "spark.executor.heartbeatInterval=2s", "--conf", "spark.network.timeout=12s",
            "--conf", "spark.network.timeoutInterval=4s", *(a for c in conf for a in ("--conf", c)),
            str(root / "jobs" / "ingest_csv.py"), "--bootstrap-servers", lab.bootstrap_servers, *job,
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "SPARK_LOCAL_IP": drv}, cwd=log.parent,
            start_new_session=True,
        )  # fmt: skip


def _on_host(lab: hosts.Lab, host: str, pid: int) -> bool:
    found = subprocess.run([net.IP, "netns", "identify", str(pid)], capture_output=True, text=True).stdout.strip()
    return found == lab.net.ns(host)


@pytest.fixture
def cluster_lab(lab_cluster):
    """The cluster lab as a test finds it: whatever links the test cut come back after."""
    yield lab_cluster
    for a, b in (("w1", hosts.DRIVER), ("w1", hosts.MASTER), (hosts.DRIVER, "b1")):
        lab_cluster.net.restore_between(a, b)


def test_a_worker_cut_off_from_the_driver_while_its_executor_sends_delivers_every_row_once(cluster_lab, tmp_path):
    """A standalone cluster in the lab; every unit is held at its first records (a fault
    point), w2's let go at once. Once w1's first unit has sent its first records and is held,
    w1 is cut off from the driver and the master, not from the brokers: Spark loses its
    executor (no heartbeat) and runs its task again on w2, while that executor, alive, holds
    its unit's transaction open. The task run again initialises the unit's transactional id,
    which fences the cut-off one: its records are aborted, and every row is in the topic once."""
    rows_in = 60_000
    path = datagen.generate("wide30", rows_in, tmp_path / "in.csv", seed=11)
    lab = cluster_lab
    log, metrics, held = tmp_path / "run.log", tmp_path / "m", tmp_path / "held"
    held.mkdir()
    point = failpoints.MID_SEND
    zombie: list[int] = []
    proc = _submit(lab, log, "--input", str(path), "--topic", "worker-cut", "--partitions", "4",
                   "--target-rate", "6000", "--run-id", "worker-cut", "--metrics-dir", str(metrics), "--quiet",
                   conf=(f"spark.executorEnv.{failpoints.ENV}={point}:{held}",))  # fmt: skip
    stop = threading.Event()

    def release_the_others() -> None:  # every unit but those of w1's executor goes on to commit
        while not stop.wait(0.05):
            for m in held.glob(f"*.{point}"):
                if not _on_host(lab, "w1", int(m.read_text())):
                    m.unlink(missing_ok=True)

    releaser = threading.Thread(target=release_the_others, name="releaser", daemon=True)
    releaser.start()
    try:

        def w1_holds() -> bool:
            return any(_on_host(lab, "w1", int(m.read_text())) for m in held.glob(f"*.{point}"))

        faults.wait_for(w1_holds, 240, "a unit of w1 held at its first records", proc, log)
        zombie[:] = _executor_pids(lab, "w1")
        [zombie_pid] = zombie
        for other in (hosts.DRIVER, hosts.MASTER):
            lab.net.cut_between("w1", other)
        with lab.net.inside(hosts.DRIVER):
            faults.landed_mid_send(lab.bootstrap_servers, ["worker-cut"], rows_in)
        code = proc.wait(300)
        assert processes.alive(zombie_pid), "the cut-off executor was to stay alive"
    finally:
        stop.set()
        releaser.join(5)
        faults.stop_group(proc)
        for other in (hosts.DRIVER, hosts.MASTER):
            lab.net.restore_between("w1", other)
        for pid in zombie:  # before the topic is read (and the lab is the next test's)
            with contextlib.suppress(psutil.NoSuchProcess):
                faults.signal_tree(faults.tree(psutil.Process(pid)), signal.SIGKILL)
    assert code == 0, log.read_text()[-3000:]
    report = faults.summary(metrics, "worker-cut")
    assert report["status"] == "succeeded" and all(c["ok"] for c in report["checks"]), report["checks"]
    assert report["duplicates"]["failed_attempts"], "no task of the cut-off executor was run again"
    faults.assert_c_loops(report)
    with lab.net.inside(hosts.DRIVER):
        records = consume_all(lab.bootstrap_servers, "worker-cut")
        fenced = faults.aborted(lab.bootstrap_servers, "worker-cut", "worker-cut")
    assert fenced > 0, "the cut-off executor's transaction was not fenced"
    faults.assert_delivered(records, expected_rows(path), [report])


def test_a_driver_cut_off_from_the_brokers_past_its_lease_is_taken_over_while_its_executors_send(cluster_lab, tmp_path):
    """A scheduled run (--incremental, a lease of 8 s) on a standalone cluster in the lab.
    Mid-send its driver is cut off from the broker, not from its workers: the executors go
    on sending, the lock goes unrenewed. Past the lease a second run, from a host of its
    own, takes the topic over: it marks the first run superseded and fences its open
    transactions, and sends what the ledger does not show. The first run's tasks stop at
    their next unit; the link comes back once the takeover is in the ledger, and the first
    run's driver learns it lost the lock and exits 6 saying who took it. Every row once
    between the two."""
    files, each = 6, 6_000
    landing = tmp_path / "landing"
    paths = [datagen.generate("wide30", each, landing / f"part-{i}.csv", seed=40 + i) for i in range(files)]
    expected = sum((expected_rows(p) for p in paths), Counter())
    log, log2, metrics = tmp_path / "cut.log", tmp_path / "successor.log", tmp_path / "m"
    common = ["--input", str(landing), "--topic", "driver-cut", "--incremental", "--lock-lease", "8",
              "--metrics-dir", str(metrics), "--quiet"]  # fmt: skip
    lab = cluster_lab
    if "drv2" not in lab.net.hosts:  # the second run's host (in the lab's namespaces: removed with it)
        lab.net.add("drv2")

    def sent() -> int:
        with lab.net.inside("drv2"):
            return faults.sent_so_far(lab.bootstrap_servers, "driver-cut")

    def superseded() -> bool:  # the successor has marked the cut-off run dead in the ledger
        with lab.net.inside("drv2"):
            found = ledger.read_records({"bootstrap.servers": lab.bootstrap_servers}, DEFAULT_LEDGER_TOPIC,
                                        isolation="read_uncommitted")  # fmt: skip
        return any(r.kind == ledger.SUPERSEDED and r.key == b'{"superseded":"cut-off"}' for r in found)

    proc = _submit(lab, log, *common, "--partitions", "2", "--target-rate", "1000",
                   "--run-id", "cut-off")  # fmt: skip
    second = None
    try:
        faults.wait_for(lambda: sent() >= 3000, 240, "sending", proc, log)
        lab.net.cut_between(hosts.DRIVER, "b1")
        at_cut = sent()
        with lab.net.inside("drv2"):
            faults.landed_mid_send(lab.bootstrap_servers, ["cut-off"], files * each)

        def lease_run_out() -> bool:  # past the lease of 8 s, on the brokers' clock (the lock's)
            with lab.net.inside("drv2"):
                return faults.claim_age_ms(lab.bootstrap_servers, "driver-cut", "cut-off") > 8000

        faults.wait_for(lease_run_out, 120, "the cut-off run's lease run out", proc, log)
        assert sent() > at_cut, "the cut-off driver's executors stopped sending"
        assert proc.poll() is None, log.read_text()[-3000:]
        # Its own hostname too: on the same host, a live PID would keep the lock alive.
        second = faults.cli(*common, "--bootstrap-servers", lab.bootstrap_servers, "--master", "local[2]",
                            "--run-id", "successor", log=log2, on=lab.net.exec("drv2"), hostname="drv2")  # fmt: skip
        faults.wait_for(superseded, 240, "the successor took the topic over", second, log2)
        assert proc.poll() is None, "the cut-off run ended before its link came back"
        lab.net.restore_between(hosts.DRIVER, "b1")
        back = time.monotonic()
        assert second.wait(240) == 0, log2.read_text()[-3000:]
        code = proc.wait(240)
        ended_after_s = time.monotonic() - back
    finally:
        faults.stop_group(proc)
        if second is not None:
            faults.stop_group(second)
        lab.net.restore_between(hosts.DRIVER, "b1")
    assert code == 6, log.read_text()[-3000:]
    [line] = faults.error_lines(log)
    assert "lost its lock" in line or "taken over by run successor" in line, line
    assert "--resume" not in line, line  # the successor sends the rest: nothing to resume
    taker, cut_off = faults.summary(metrics, "successor"), faults.summary(metrics, "cut-off")
    faults.assert_c_loops(taker)  # (the cut-off run's report, failed, has no executors' table)
    assert taker["delivery"]["lock"]["taken_over_from"] == ["cut-off"], taker["delivery"]["lock"]
    assert cut_off["status"] == "failed" and cut_off["delivery"]["lock"].get("renewal_failures"), cut_off["delivery"]
    with lab.net.inside("drv2"):
        records = consume_all(lab.bootstrap_servers, "driver-cut")
    faults.assert_delivered(records, expected, [cut_off, taker])
    print(f"driver cut at {at_cut} records; the cut-off run sent {cut_off['rows_sent']}, ended {ended_after_s:.0f} s"
          f" after the link came back: {line}; the successor sent {taker['rows_sent']}")  # fmt: skip


def _retransmitted(lab: hosts.Lab, host: str) -> int:
    """TCP segments ``host`` has sent again so far (its network's own counter)."""
    out = subprocess.run([*lab.net.exec(host), "cat", "/proc/net/snmp"], capture_output=True, text=True, check=True)
    names, values = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("Tcp:")]
    return int(values[names.index("RetransSegs")])


def test_a_store_20_ms_away_cut_off_for_15_s_mid_read_ends_every_row_once(cluster_lab, lab_store, tmp_path):
    """The cluster recipe reading four objects from the store's own host, 20 ms of round
    trip away (its delaying proxy), each task its splits with ranged GETs of 2 MB as it
    sends. Mid-send, the store's link is cut for 15 s, less than a read's idle limit (20 s):
    a GET in flight stalls, then is answered or asked again; the workers' own TCP counters
    show they sent to the store during the cut and were not answered. The run
    succeeds (or, had the retries run out, exits 4 and --resume completes it): every row
    once, read back read_committed."""
    lab = cluster_lab
    files, each = 4, 10_000  # 2.3 MB an object: two GETs each, spread over the send by the rate
    expected: Counter = Counter()
    for i in range(files):
        path = datagen.generate("wide30", each, tmp_path / f"part-{i}.csv", seed=60 + i)
        expected += expected_rows(path)
        lab_s3_put(lab, lab_store, f"cut/part-{i}.csv", path)
        path.unlink()
    lab.delay(hosts.STORE, 20)  # returns once the proxy applies it
    log, metrics = tmp_path / "run.log", tmp_path / "m"
    proc = _submit(lab, log, "--input", "s3://landing/cut/", "--s3-endpoint", lab_store.endpoint,
                   "--topic", "store-cut", "--partitions", "4", "--target-rate", "2000", "--run-id", "store-cut",
                   "--metrics-dir", str(metrics), "--quiet")  # fmt: skip
    workers = ("w1", "w2")
    try:
        _wait_sending(lab, "store-cut", 3000, proc, log)
        with lab.net.inside(hosts.DRIVER):
            faults.landed_mid_send(lab.bootstrap_servers, ["store-cut"], files * each)
        before = {w: _retransmitted(lab, w) for w in workers}
        lab.net.cut(hosts.STORE)  # its link down: what the workers send it is lost on the way
        try:
            time.sleep(15)  # the fault itself: a cut of this length (what follows waits for conditions)
            during = {w: _retransmitted(lab, w) - before[w] for w in workers}
        finally:
            lab.net.restore(hosts.STORE)
        code = proc.wait(300)
    finally:
        faults.stop_group(proc)
        lab.delay(hosts.STORE, 0)
    assert sum(during.values()) > 0, f"no packet of the workers was dropped by the cut: {during}"
    reports = [faults.summary(metrics, "store-cut")]
    if code == 4:  # the reads' retries ran out: the documented end, then --resume
        [line] = faults.error_lines(log)
        assert "--resume" in line, line
        resumed = subprocess.run([*lab.net.exec(hosts.DRIVER), sys.executable, "-m", "kappa_ingest.cli", "ingest",
                                  "--resume", "store-cut", "--run-id", "store-cut-resumed", "--master", "local[2]",
                                  "--metrics-dir", str(metrics), "--quiet"], capture_output=True, text=True,
                                 timeout=300, env={**os.environ, "SPARK_LOCAL_IP": lab.net.hosts[hosts.DRIVER]})  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        reports.append(faults.summary(metrics, "store-cut-resumed"))
    else:
        assert code == 0, log.read_text()[-3000:]
    assert all(c["ok"] for c in reports[-1]["checks"]), reports[-1]["checks"]
    faults.assert_c_loops(reports[0] if code == 0 else reports[-1])
    with lab.net.inside(hosts.DRIVER):
        records = consume_all(lab.bootstrap_servers, "store-cut")
    faults.assert_delivered(records, expected, reports)
    print(f"store cut for 15 s: exit {code}, TCP segments the workers sent again during it {during}")
