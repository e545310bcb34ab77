"""One run at a time per topic: a second run exits 6 naming the first; a dead run's lock
is taken over (at once on its own host, after its lease elsewhere, by the broker's clock)
and its transactions ended; a holder whose lock was taken over learns it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer

from faults import Releaser, barrier, claim_age_ms, cli, error_lines, released_together, stop_group, wait_for
from helpers import consume_all, expected_rows, held_back, rows
from kappa_ingest import config, datagen, failpoints
from kappa_ingest.config.choices import DEFAULT_LEDGER_TOPIC as DEFAULT_TOPIC
from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery import lock
from kappa_ingest.delivery.ledger import read_records
from kappa_ingest.errors import LockHeld
from kappa_ingest.kafka.settings import connection_conf
from kappa_ingest.kafka.topics import Admin

pytestmark = pytest.mark.integration


def _cfg(kafka, topic: str, run_id: str, tmp_path, **extra) -> config.IngestConfig:
    return config.validate({"inputs": ["x.csv"], "topic": topic, "run_id": run_id, "metrics_dir": str(tmp_path),
                            "bootstrap_servers": kafka.bootstrap_servers, **extra})  # fmt: skip


def _fake_claim(kafka, topic: str, run_id: str, **fields) -> None:
    """A claim as another run writes it; ``host`` elsewhere unless given."""
    values = {"lineage": run_id, "host": "elsewhere", "pid": 1, "pid_started": None, "at_ms": time.time_ns() // 10**6,
              "scope": delivery.scope_prefix(topic, run_id, False), **fields}  # fmt: skip
    claim = lock.Claim(topic, run_id, **values)
    lock._write(connection_conf(None, kafka.bootstrap_servers), DEFAULT_TOPIC, claim.key(), claim.value())


def _left_open(kafka, topic: str, txid: str) -> Producer:
    """A producer of ``txid`` with a transaction open on ``topic``, a record in it: what a
    killed run's task leaves, or its zombie holds."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": txid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"left open", b"k")
    assert producer.flush(10) == 0
    return producer


def _claims(kafka, topic: str) -> dict:
    conf = connection_conf(None, kafka.bootstrap_servers)
    return lock.claims(read_records(conf, DEFAULT_TOPIC, isolation="read_uncommitted"), topic)


def test_a_second_run_is_refused_naming_the_first_until_it_releases(kafka, tmp_path):
    first = lock.hold(_cfg(kafka, "locked", "run-a", tmp_path), kafka.bootstrap_servers)
    try:
        with pytest.raises(LockHeld, match=r"topic locked is locked by run run-a \(host .*, pid \d+, renewed") as e:
            lock.hold(_cfg(kafka, "locked", "run-b", tmp_path), kafka.bootstrap_servers)
        assert e.value.exit_code == 6
        other_topic = lock.hold(_cfg(kafka, "locked-other", "run-c", tmp_path), kafka.bootstrap_servers)
        other_topic.release()
    finally:
        first.release()
    second = lock.hold(_cfg(kafka, "locked", "run-b", tmp_path), kafka.bootstrap_servers)
    second.release()
    assert second.taken_over == []


def test_a_lock_whose_renewals_stopped_for_its_summary_is_still_withdrawn_by_its_release_once(kafka, tmp_path):
    """A run ends: renewals stopped (its report's summary is final), then the claim withdrawn
    on a thread while the run is recorded; a second release withdraws nothing more."""
    first = lock.hold(_cfg(kafka, "stopped-then-released", "run-a", tmp_path), kafka.bootstrap_servers)
    first.stop_renewing()
    assert first.summary()["held"] and "run-a" in _claims(kafka, "stopped-then-released")
    with pytest.raises(LockHeld):  # stopped renewing: still held until withdrawn
        lock.hold(_cfg(kafka, "stopped-then-released", "run-b", tmp_path), kafka.bootstrap_servers)
    first.release()
    assert "run-a" not in _claims(kafka, "stopped-then-released")
    second = lock.hold(_cfg(kafka, "stopped-then-released", "run-b", tmp_path), kafka.bootstrap_servers)
    first.release()  # once: the second run's claim stays
    assert "run-b" in _claims(kafka, "stopped-then-released")
    second.release()
    assert second.taken_over == []


def test_a_dead_runs_lock_is_taken_over_and_its_open_transaction_ended(kafka, tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process of this host that no longer exists
    host, boot, pidns = lock.host_identity()
    _fake_claim(kafka, "orphaned", "killed-here", host=host, boot=boot, pidns=pidns, pid=gone.pid, pid_started=1)
    _fake_claim(kafka, "orphaned", "silent-elsewhere", lease_ms=1000)
    # The killed run's task had a transaction open on the topic: as its zombie would, a
    # producer of one of its units' ids holds one, with a record in it.
    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic("orphaned", 2, 1)
    zombie_id = delivery.scope_prefix("orphaned", "killed-here", False) + "u:0123456789abcdef01234567"
    zombie = _left_open(kafka, "orphaned", zombie_id)
    # Past the silent claim's lease of 1 s, by the brokers' clock (the lock's).
    wait_for(lambda: claim_age_ms(kafka.bootstrap_servers, "orphaned", "silent-elsewhere") > 1000, 30,
             "the silent claim's lease run out")  # fmt: skip
    held = lock.hold(_cfg(kafka, "orphaned", "successor", tmp_path), kafka.bootstrap_servers)
    held.release()
    assert sorted(held.taken_over) == ["killed-here", "silent-elsewhere"]
    assert zombie_id in held.lingering.fenced
    with pytest.raises(KafkaException) as fenced:  # the zombie can commit nothing: its transaction was aborted
        zombie.commit_transaction(10)
    assert fenced.value.args[0].code() in (-144, 90, 47), fenced.value  # _FENCED, PRODUCER_FENCED, INVALID_EPOCH
    assert not held_back(kafka.bootstrap_servers, "orphaned") and consume_all(kafka.bootstrap_servers, "orphaned") == []
    _fake_claim(kafka, "orphaned", "alive-elsewhere")  # renewed just now (by the broker's clock) on another host
    with pytest.raises(LockHeld, match="alive-elsewhere"):
        lock.hold(_cfg(kafka, "orphaned", "late", tmp_path), kafka.bootstrap_servers)
    assert _claims(kafka, "orphaned").keys() == {"alive-elsewhere"}  # the refused run withdrew its claim


def test_liveness_is_judged_on_the_brokers_clock_and_by_pid_only_in_one_pid_namespace(kafka, tmp_path):
    now_ms = time.time_ns() // 10**6
    # A holder whose own clock runs 45 s behind (or a reader's 45 s ahead): what it wrote in
    # its claim is not compared; the broker stamped the claim just now.
    _fake_claim(kafka, "skewed", "slow-clock", at_ms=now_ms - 45_000)
    with pytest.raises(LockHeld, match="slow-clock"):
        lock.hold(_cfg(kafka, "skewed", "reader", tmp_path), kafka.bootstrap_servers)
    # Same hostname, another PID namespace (a container sharing the host's name): its PID
    # means nothing here, so it is alive until its lease passes.
    host, boot, pidns = lock.host_identity()
    _fake_claim(kafka, "namespaced", "in-a-container", host=host, boot=boot, pidns=(pidns or 0) + 1, pid=999_999,
                pid_started=1)  # fmt: skip
    with pytest.raises(LockHeld, match="in-a-container"):
        lock.hold(_cfg(kafka, "namespaced", "reader", tmp_path), kafka.bootstrap_servers)


def test_a_holder_whose_lock_is_taken_over_learns_it_and_says_who(kafka, tmp_path):
    held = lock.hold(_cfg(kafka, "taken-from-me", "victim", tmp_path, lock_lease_s=2), kafka.bootstrap_servers)
    told: list[str] = []
    held.on_lost(told.append)
    try:
        assert held.lost is None
        # Another run judged it dead (its renewals cut off, say) and took over: it recorded
        # the run as superseded and withdrew its claim.
        conf = connection_conf(None, kafka.bootstrap_servers)
        from kappa_ingest.delivery import ledger

        ledger.supersede(conf, DEFAULT_TOPIC, ["victim"], "usurper")
        lock._write(conf, DEFAULT_TOPIC, held.claim.key(), None)
        wait_for(lambda: held.lost is not None, 30, "the holder learning it lost the lock")
    finally:
        held.release()
    assert held.lost and "usurper took it over" in held.lost and told == [held.lost]


def test_a_lock_released_while_a_renewal_reads_the_ledger_is_never_lost_after_release(kafka, tmp_path, monkeypatch):
    """A renewal under way when the run releases its lock: release() waits for it, and the
    takeover it then reads (the run is over) calls nobody; once release() returns, on_lost
    is never called."""
    held = lock.hold(_cfg(kafka, "released-mid-look", "leaving", tmp_path), kafka.bootstrap_servers)
    told: list[str] = []
    held.on_lost(told.append)
    conf = connection_conf(None, kafka.bootstrap_servers)
    from kappa_ingest.delivery import ledger

    ledger.supersede(conf, DEFAULT_TOPIC, ["leaving"], "usurper")  # seen by the renewal's read below
    upto, _ = lock._write(conf, DEFAULT_TOPIC, held.claim.key(), held.claim.value())  # the renewal's own record
    reading, go = threading.Event(), threading.Event()
    real = ledger.read_records

    def read_held_back(*args, **kwargs):
        records = real(*args, **kwargs)
        if threading.current_thread().name == "renewal-under-way":
            reading.set()
            go.wait(30)
        return records

    monkeypatch.setattr(ledger, "read_records", read_held_back)
    renewal = threading.Thread(target=held._look, args=(upto,), name="renewal-under-way")
    held._thread = renewal  # the renewal thread, mid-renewal (the real one sleeps out its lease/4)
    steps: list = []  # what release() does, in order
    real_join, real_write = renewal.join, lock._write
    monkeypatch.setattr(
        renewal, "join", lambda timeout=None: (steps.append("waits for the renewal"), real_join(timeout))
    )
    monkeypatch.setattr(
        lock, "_write", lambda *a, **k: (steps.append(("withdraws", renewal.is_alive())), real_write(*a, **k))[1]
    )
    renewal.start()
    assert reading.wait(30)
    releasing = threading.Thread(target=held.release, name="release")
    releasing.start()
    wait_for(lambda: steps, 10, "release() under way")
    assert steps == ["waits for the renewal"], steps  # not its claim withdrawn while the renewal reads
    go.set()
    releasing.join(30)
    assert not releasing.is_alive() and steps == ["waits for the renewal", ("withdraws", False)], steps
    assert held.position > upto - 1 and told == [] and held.lost is None, (held.position, upto, told)


def test_two_runs_released_together_one_holds_the_lock_the_other_exits_6(kafka, tmp_path):
    path = datagen.generate("debs2012", 20_000, tmp_path / "in.csv")
    common = ["--input", str(path), "--topic", "two-at-once", "--bootstrap-servers", kafka.bootstrap_servers,
              "--metrics-dir", str(tmp_path / "m"), "--master", "local[1]", "--target-rate", "4000", "--quiet"]  # fmt: skip
    # Both started, then released by one barrier: their claims reach the ledger together.
    env, hook = barrier(tmp_path)
    logs = {r: tmp_path / f"{r}.log" for r in ("a", "b")}
    procs = {r: cli(*common, "--run-id", r, log=logs[r], env=env) for r in ("a", "b")}
    codes = released_together(procs, hook)
    assert sorted(codes.values()) == [0, 6], {r: (tmp_path / f"{r}.log").read_text()[-1500:] for r in procs}
    loser = next(r for r, c in codes.items() if c == 6)
    winner = next(r for r in procs if r != loser)
    errors = error_lines(logs[loser])
    assert len(errors) == 1 and f"locked by run {winner}" in errors[0], logs[loser].read_text()
    assert rows(consume_all(kafka.bootstrap_servers, "two-at-once")) == expected_rows(path)


def test_a_host_whose_clock_runs_ahead_cannot_take_a_live_lock(kafka, tmp_path):
    """Run B, on a host of its own (another hostname: liveness by lease, not by PID), has a
    clock 45 s ahead of run A's (the host's clock as Python reads it: Debian's faketime
    hangs librdkafka). Judged on the hosts' clocks, B found A's claim 45 s old and, with a
    30 s lease, dead; on the broker's clock it is fresh."""
    path = datagen.generate("debs2012", 20_000, tmp_path / "in.csv")
    common = ["--input", str(path), "--topic", "skewed-hosts", "--bootstrap-servers", kafka.bootstrap_servers,
              "--metrics-dir", str(tmp_path / "m"), "--master", "local[1]", "--quiet", "--lock-lease", "30"]  # fmt: skip
    ahead = tmp_path / "ahead"
    ahead.mkdir()
    (ahead / "sitecustomize.py").write_text(
        "import time\n_t, _ns = time.time, time.time_ns\n"
        "time.time = lambda: _t() + 45\ntime.time_ns = lambda: _ns() + 45 * 10**9\n"
    )
    skewed = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ahead), os.environ.get("PYTHONPATH")]))}
    # Run A is held at its first records (its lock taken, its claim renewed) until B has ended.
    held = tmp_path / "held"
    held.mkdir()
    first = cli(*common, "--run-id", "steady", log=tmp_path / "a.log",
                env={failpoints.ENV: f"{failpoints.MID_SEND}:{held}"})  # fmt: skip
    releasing = Releaser(held, failpoints.MID_SEND, paused=True)
    try:
        releasing.next_held(first, tmp_path / "a.log")
        assert "steady" in _claims(kafka, "skewed-hosts")
        second = cli(*common, "--run-id", "ahead", log=tmp_path / "b.log", env=skewed, hostname="host-ahead")
        try:
            rc = second.wait(120)
        finally:
            stop_group(second)
        probe = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], capture_output=True,
                               text=True, env={**os.environ, **skewed}, check=True)  # fmt: skip
        assert float(probe.stdout) - time.time() > 40  # the skew was in force
        releasing.resume()
        assert first.wait(180) == 0, (tmp_path / "a.log").read_text()[-2000:]
    finally:
        releasing.stop()
        stop_group(first)
    [line] = error_lines(tmp_path / "b.log")
    assert rc == 6 and "locked by run steady" in line, line
    report = json.loads((tmp_path / "m" / "runs" / "ahead" / "summary.json").read_text())
    assert report["status"] == "failed" and "locked by run steady" in report["error"]


def test_a_run_without_the_lock_still_ends_what_failed_runs_left_open(kafka, tmp_path):
    with Admin(kafka.bootstrap_servers) as admin:
        admin.ensure_topic("no-lock", 1, 1)
    left = delivery.scope_prefix("no-lock", "failed-run", True) + "u:00000000000000000000dead"
    _left_open(kafka, "no-lock", left)
    held = lock.hold(_cfg(kafka, "no-lock", "later", tmp_path, lock=False, incremental=True), kafka.bootstrap_servers)
    assert held.claim is None and left in held.lingering.fenced
    assert "later" not in _claims(kafka, "no-lock")
    assert not held_back(kafka.bootstrap_servers, "no-lock") and consume_all(kafka.bootstrap_servers, "no-lock") == []
