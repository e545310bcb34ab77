"""What the fault tests share: runs as processes of their own (the CLI, in a process group,
on a host of its own if asked), bounded waits, the processes a fault lands on, and the
checks that a fault landed while rows were being sent and that the topic holds every row
exactly where it should be."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from helpers import consume_all, high_watermarks, rows
from kappa_ingest.config.choices import DEFAULT_LEDGER_TOPIC
from kappa_ingest.delivery import ledger


def cli(
    *args: str,
    log: Path,
    env: dict | None = None,
    hostname: str | None = None,
    on: list[str] | None = None,
    command: str = "ingest",
) -> subprocess.Popen:
    """``kappa-ingest ingest ARGS`` (or another ``command``) as its own process (group),
    output to ``log``; with ``hostname``, on a host of its own (a UTS namespace: another
    hostname, same network); with ``on``, a lab host's ``ip netns exec NS`` (a network of its own)."""
    out = open(log, "wb")
    command = [*(on or []), sys.executable, "-m", "kappa_ingest.cli", command, *args]
    if hostname is not None:
        command = ["unshare", "--uts", "sh", "-c", f'hostname {hostname} && exec "$@"', "sh", *command]
    return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})})  # fmt: skip


def barrier(tmp_path: Path) -> tuple[dict, Path]:
    """An environment in which a run's Python, at start-up, says it is ready (a file of its
    own) and waits for the gate: runs started with it go at once, their first steps together."""
    gate, hook = tmp_path / "barrier-open", tmp_path / "barrier"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, pathlib, time\n"
        f"pathlib.Path({str(hook)!r}, f'ready-{{os.getpid()}}').touch()\n"
        f"p = pathlib.Path({str(gate)!r})\nwhile not p.exists(): time.sleep(0.005)\n"
    )
    return {"PYTHONPATH": str(hook)}, hook


def released_together(procs: dict[str, subprocess.Popen], hook: Path, timeout_s: float = 180) -> dict[str, int]:
    """Open the barrier once every run waits at it; their exit codes. Each run's process
    group is stopped after, whatever happened."""
    try:
        wait_for(lambda: len(list(hook.glob("ready-*"))) >= len(procs), 120, "every run at the barrier")
        (hook.parent / "barrier-open").touch()
        return {r: p.wait(timeout_s) for r, p in procs.items()}
    finally:
        for p in procs.values():
            stop_group(p)


def wait_for(condition, timeout_s: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the run ended ({proc.returncode}) before {what}:\n{log.read_text()[-3000:] if log else ''}")
        assert time.monotonic() < deadline, f"not {what} within {timeout_s} s"
        time.sleep(0.1)


def stop_group(proc: subprocess.Popen) -> None:
    """Whatever a test leaves running of a run (its JVMs, workers) goes, by process group."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    proc.wait(30)


def resumed(run_id: str, metrics: Path, log: Path) -> dict:
    """``--resume run_id`` as ``<run_id>-2``, run to its end (exit 0 asserted): its report."""
    proc = cli("--resume", run_id, "--metrics-dir", str(metrics), "--run-id", f"{run_id}-2", "--quiet", log=log)
    try:
        assert proc.wait(180) == 0, log.read_text()[-3000:]
    finally:
        stop_group(proc)
    return summary(metrics, f"{run_id}-2")


def summary(metrics: Path, run_id: str) -> dict:
    return json.loads((metrics / "runs" / run_id / "summary.json").read_text())


def error_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("kappa-ingest: error:")]


def sent_so_far(bootstrap: str, topic: str) -> int:
    """Records appended to ``topic`` so far (0 before the run creates it); a failed read raises."""
    if not topic_exists(bootstrap, topic):
        return 0
    return sum(high_watermarks(bootstrap, topic).values())


def topic_exists(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)  # no topic named: none created
    return topic in md.topics


def committed(bootstrap: str, run_id: str) -> list:
    """The ledger entries of ``run_id``: units it committed (exactly-once) or had acknowledged."""
    return [e for e in ledger.read({"bootstrap.servers": bootstrap}, DEFAULT_LEDGER_TOPIC) if e.run_id == run_id]


def committed_rows(bootstrap: str, run_id: str) -> int:
    return sum(e.rows_sent for e in committed(bootstrap, run_id))


def landed_mid_send(bootstrap: str, run_ids: list[str], total: int) -> int:
    """The rows the runs had committed when the fault landed: some, not all (else the fault
    hit a run that was not sending). Returns them."""
    done = sum(committed_rows(bootstrap, r) for r in run_ids)
    assert done < total, f"the fault landed after every row was committed ({done} of {total})"
    return done


def executors(proc: subprocess.Popen) -> list[psutil.Process]:
    """The executor JVMs of a run on local-cluster."""

    def is_executor(p: psutil.Process) -> bool:
        try:
            return any("CoarseGrainedExecutorBackend" in a for a in p.cmdline())
        except psutil.Error:  # gone, or a zombie
            return False

    return [p for p in psutil.Process(proc.pid).children(recursive=True) if is_executor(p)]


def executor_of(pid: int) -> psutil.Process:
    """The executor JVM a Python worker belongs to."""
    for parent in psutil.Process(pid).parents():
        if any("CoarseGrainedExecutorBackend" in a for a in parent.cmdline()):
            return parent
    raise AssertionError(f"process {pid} runs under no executor")


def tree(p: psutil.Process) -> list[psutil.Process]:
    return [p, *p.children(recursive=True)]


def signal_tree(processes: list[psutil.Process], sig: int) -> None:
    for p in processes:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def assert_delivered(records, expected: Counter, reports: list[dict], mode: str = "exactly-once") -> None:
    """Every expected row in the topic; in exactly-once mode each once; the duplicates the
    reports count are the ones a consumer finds."""
    got = rows(records)
    missing = expected - got
    assert not missing, f"{sum(missing.values())} rows lost"
    extra = sum((got - expected).values())
    counted = sum(r["duplicates"]["count"] for r in reports)
    if mode == "exactly-once":
        assert not extra, f"{extra} rows twice"
    assert counted == extra, (counted, extra)
    for r in reports:
        assert sum(r["duplicates"]["by_file"].values()) == r["duplicates"]["count"]


def assert_c_loops(report: dict) -> None:
    """The confluent sink's record loops were the C ones: a silent fallback to the Python
    ones would not pass for the path under test (``make test`` refuses to start without a
    C compiler, and an executor without one takes the loops built on the driver)."""
    if report["sink"] == "confluent":
        loops = {e["record_loops"] for e in report["executors"] if e["record_loops"]}  # a killed one reports none
        assert loops == {"C"}, report["executors"]


def _of_run(records, run_id: str, file: str | None) -> int:
    return sum(1 for r in records if r.headers.get("run_id") == run_id.encode()
               and (file is None or r.headers.get("source_file", b"").decode().endswith(file)))  # fmt: skip


def in_log(bootstrap: str, topic: str, run_id: str, file: str | None = None) -> int:
    """Records of ``run_id`` (of ``file``) in the topic's log, committed or not (read_uncommitted)."""
    return _of_run(consume_all(bootstrap, topic, json_values=False, isolation="read_uncommitted"), run_id, file)


def aborted(bootstrap: str, topic: str, run_id: str, file: str | None = None) -> int:
    """Records of ``run_id`` (of ``file``) in the topic's log that no reader will see: written
    in transactions that were aborted (fenced, most often). Once no transaction is open on
    the topic: a read_committed reader waits for one."""
    return in_log(bootstrap, topic, run_id, file) - _of_run(
        consume_all(bootstrap, topic, json_values=False), run_id, file
    )


def broker_now_ms(bootstrap: str) -> int:
    """The brokers' clock now, as the lock reads it: the time a broker stamps on a record it
    appends (LogAppendTime), here on a topic of the tests' own."""
    from confluent_kafka import Producer

    from kappa_ingest.kafka.topics import Admin

    with Admin(bootstrap) as admin:
        admin.ensure_topic("_test_clock", 1, 1, {"message.timestamp.type": "LogAppendTime"})
    stamped: list[int] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    p.produce("_test_clock", b"now", on_delivery=lambda err, msg: stamped.append(msg.timestamp()[1]))
    assert p.flush(30) == 0 and stamped, "the clock topic took no record"
    return stamped[0]


def claim_age_ms(bootstrap: str, topic: str, run_id: str) -> int | None:
    """How long ago, on the brokers' clock, ``run_id`` last renewed its claim on ``topic``'s lock."""
    from kappa_ingest.delivery import lock
    from kappa_ingest.kafka.settings import connection_conf

    records = ledger.read_records(connection_conf(None, bootstrap), DEFAULT_LEDGER_TOPIC, isolation="read_uncommitted")
    claim = lock.claims(records, topic).get(run_id)
    return None if claim is None else broker_now_ms(bootstrap) - claim.ts


def spark_executor_active(ui_port: int, executor_id: str, host: str = "127.0.0.1") -> bool | None:
    """Whether the driver (its UI at ``host:ui_port``) still counts executor ``executor_id``
    as active, by Spark's REST API; None if the driver does not answer."""
    import urllib.request

    base = f"http://{host}:{ui_port}/api/v1/applications"
    try:
        with urllib.request.urlopen(base, timeout=5) as r:
            [app] = json.load(r)
        with urllib.request.urlopen(f"{base}/{app['id']}/allexecutors", timeout=5) as r:
            found = [e for e in json.load(r) if e["id"] == executor_id]
    except (OSError, ValueError):
        return None
    return bool(found) and found[0]["isActive"]


def executor_id(executor: psutil.Process) -> str:
    """A Spark executor JVM's id, from its command line."""
    args = executor.cmdline()
    return args[args.index("--executor-id") + 1]


class Releaser(threading.Thread):
    """Lets every task held at ``point`` go on at once, unless paused (then they wait)."""

    def __init__(self, held: Path, point: str, paused: bool = False) -> None:
        super().__init__(name="releaser", daemon=True)
        self.held, self.point = held, point
        self._run, self._halt = threading.Event(), threading.Event()
        if not paused:
            self._run.set()
        self.start()

    def run(self) -> None:
        while not self._halt.wait(0.02):
            if self._run.is_set():
                for m in self.held.glob(f"*.{self.point}"):
                    m.unlink(missing_ok=True)

    def pause(self) -> None:
        self._run.clear()

    def resume(self) -> None:
        self._run.set()

    def next_held(self, proc, log) -> Path:
        found: list[Path] = []
        wait_for(lambda: found.extend(self.held.glob(f"*.{self.point}")) or found, 120, "a unit held", proc, log)
        return found[0]

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        for m in self.held.glob(f"*.{self.point}"):
            m.unlink(missing_ok=True)
