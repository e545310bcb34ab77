"""Failures as a user meets them: the contract's exit code, one line on stderr naming the
cause and the fix, no stack trace, and a summary.json with status failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
CLI = str(Path(sys.executable).parent / "kappa-ingest")


def cli(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run(
        [CLI, "ingest", "--metrics-dir", str(tmp_path / "m"), "--master", "local[1]", *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path,
    )  # fmt: skip


def summaries(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (tmp_path / "m" / "runs").glob("*/summary.json")]


def assert_one_clean_line(stderr: str, *needles: str) -> None:
    lines = [line for line in stderr.splitlines() if line.startswith("kappa-ingest:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_missing_input_exits_3(tmp_path):
    done = cli(tmp_path, "--input", str(tmp_path / "nope.csv"), "--topic", "t")
    assert done.returncode == 3
    assert_one_clean_line(done.stderr, "nope.csv", "no such file", "--input")
    [summary] = summaries(tmp_path)
    assert summary["status"] == "failed" and "nope.csv" in summary["error"]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--no-such-option"], ["unrecognized arguments: --no-such-option"]),
        (["--partitions", "0"], ["--partitions", "positive"]),
        (["--kafka-opt", "frobnicate=1"], ["frobnicate", "accepted:", "linger.ms"]),
        (["--sink", "carrier-pigeon"], ["--sink", "confluent"]),
        (["--encoding", "klingon"], ["--encoding", "utf-8"]),
    ],
)
def test_bad_usage_exits_2(tmp_path, args, needles):
    (tmp_path / "in.csv").write_text("a\n1\n")
    done = cli(tmp_path, "--input", str(tmp_path / "in.csv"), "--topic", "t", *args)
    assert done.returncode == 2, done.stderr
    assert_one_clean_line(done.stderr, *needles)
    [summary] = summaries(tmp_path)
    assert summary["status"] == "failed"


def test_a_spark_setting_spark_refuses_exits_2_naming_it(tmp_path):
    (tmp_path / "in.csv").write_text("a\n1\n")
    done = cli(tmp_path, "--input", str(tmp_path / "in.csv"), "--topic", "t", "--dry-run",
               "--spark-conf", "spark.executor.memory=lots")  # fmt: skip
    assert done.returncode == 2, done.stderr
    # Spark's launcher prints its own reason (with a Java trace) before ours.
    assert "Executor memory must be a positive number" in done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.startswith("kappa-ingest:")]
    assert "Spark refused to start with the settings spark.executor.memory" in line and "lots" not in line, line


def test_unreachable_broker_exits_4_before_spark_starts(tmp_path):
    (tmp_path / "in.csv").write_text("a\n1\n")
    done = cli(tmp_path, "--input", str(tmp_path / "in.csv"), "--topic", "t", "--bootstrap-servers", "127.0.0.1:1")
    assert done.returncode == 4, done.stderr
    assert_one_clean_line(done.stderr, "unreachable", "127.0.0.1:1", "--bootstrap-servers")
    assert "Setting default log level" not in done.stderr  # Spark's first words: checked before it starts
    [summary] = summaries(tmp_path)
    assert summary["status"] == "failed" and "unreachable" in summary["error"]


def test_strict_header_refuses_files_with_different_headers_with_exit_3(tmp_path, kafka):
    (tmp_path / "a.csv").write_text("a,b\n1,2\n")
    (tmp_path / "b.csv").write_text("a,c\n3,4\n")
    done = cli(tmp_path, "--input", str(tmp_path / "a.csv"), "--input", str(tmp_path / "b.csv"), "--topic", "hdr",
               "--bootstrap-servers", kafka.bootstrap_servers, "--strict-header")  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert_one_clean_line(done.stderr, "header", "differs", "--strict-header")
    assert "EOFError" not in done.stderr
    [summary] = summaries(tmp_path)
    assert summary["status"] == "failed"


def test_a_good_run_through_the_cli_exits_0_and_its_clock_covers_the_command(tmp_path):
    """No --bootstrap-servers: the run starts its own broker beside Spark and stops it; the
    report's clock starts with the process and its phases add up to wall_s."""
    from datetime import datetime

    (tmp_path / "in.csv").write_text("a,b\n1,2\n3,4\n")
    launched = time.time()
    proc = subprocess.Popen([CLI, "ingest", "--metrics-dir", str(tmp_path / "m"), "--master", "local[1]", "--input",
                             str(tmp_path / "in.csv"), "--topic", "cli-ok"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    running = time.time()  # the process exists: it started between launched and now
    stdout, stderr = proc.communicate(timeout=300)
    exited = time.time()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode == 0, done.stderr
    assert "SUCCEEDED" in done.stdout and "executors" in done.stdout and "phases: start-up" in done.stdout
    # Nothing on the terminal that is not the project's own: not the JVM's and Spark's start-up lines.
    noise = ("WARNING: Using incubator modules", "Setting default log level", "To adjust logging level")
    assert not [line for line in (stdout + stderr).splitlines() if line.startswith(noise)], stderr
    [summary] = summaries(tmp_path)
    assert summary["rows_sent"] == 2 and summary["broker"]["embedded"] is True
    assert all(c["ok"] for c in summary["checks"]) and summary["delivery"]["verified_by"] == "offsets"
    # Exactly-once by default: two records and their transaction's commit marker in each partition it wrote.
    assert summary["delivery"]["transactions_committed"] == 1 and summary["broker"]["offset_delta"] - 2 in (1, 2)
    started = datetime.fromisoformat(summary["started_at"].replace("Z", "+00:00")).timestamp()
    finished = datetime.fromisoformat(summary["finished_at"].replace("Z", "+00:00")).timestamp()
    # The process's own start, not the session's: between the two moments around its launch,
    # give or take the kernel's clock tick (its start time is counted in ticks) and the report's ms.
    tick = 1 / os.sysconf("SC_CLK_TCK") + 0.001
    assert launched - tick <= started <= running + tick, (launched, started, running)
    assert running <= finished <= exited
    assert sum(summary["phases"].values()) == pytest.approx(summary["wall_s"], abs=0.002)  # rounded to ms each
    assert all(v >= 0 for v in summary["phases"].values()) and summary["phases"]["sending_s"] > 0
    # The run's broker is gone with it, and nothing of it is left behind.
    port = int(summary["bootstrap_servers"].rsplit(":", 1)[1])
    import socket

    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
