"""``kappa-ingest bench --profile``: where a row's time goes while kappa-ingest sends.

One ``kappa-ingest ingest`` of the input (``local[2]``, exactly-once, the default sink) into
a broker of its own, warmed by an uncounted run of the same; when the topic's first
records appear (its sending window, on the broker's clock), two profilers attach for a few
seconds: ``py-spy record --native`` to the busiest Python worker (Python and C frames) and
``perf record`` to the Spark JVM (its JIT-compiled frames named from the map ``jcmd
Compiler.perfmap`` writes before the JVM ends). Each profile's top functions by their own
time, and the commands, go to ``bench-results/profile-STAMP/``. Root (or ptrace and
perf_event permission) and Debian's ``linux-perf`` are needed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psutil

from kappa_ingest import datagen
from kappa_ingest.bench.monitor import PYTHON_WORKERS, SPARK_JVM, group_of
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka.topics import Admin

TOP = 30


def run_profile(
    out_root: Path, data_dir: Path, layout: str, rows: int, seconds: float, command: str, options: list[str]
) -> Path:
    """``options``: the run's own (an option path's: ``--event-time-column ts --key-column mf01``), after the bench's."""
    for tool in ("py-spy", "perf", "jcmd"):
        if _tool(tool) is None:
            raise RuntimeError(
                f"bench --profile needs {tool} (py-spy: pip; perf: apt-get install linux-perf; jcmd: the JDK)"
            )
    data = data_dir / f"{layout}-{rows}.csv"
    if not data.exists():
        datagen.generate(layout, rows, data)
    out = out_root / f"profile-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="kappa-profile-") as tmp:
        cluster = local_kafka.start(Path(tmp) / "kafka", heap="1g")
        try:
            _ingest(data, "profile-warm-up", cluster.bootstrap_servers, Path(tmp), options).wait(600)
            found = _profiled(data, cluster.bootstrap_servers, Path(tmp), out, seconds, options)
        finally:
            cluster.stop()
    found.update(command=command, input=str(data), rows=rows, seconds=seconds, options=options)
    (out / "results.json").write_text(json.dumps(found, indent=2) + "\n")
    (out / "results.md").write_text(_markdown(found))
    print((out / "results.md").read_text())
    print(f"bench --profile: {out}")
    return out


def _tool(name: str) -> str | None:
    """``name`` on the PATH or beside this Python (py-spy in the venv)."""
    return shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def _ingest(data: Path, topic: str, bootstrap: str, tmp: Path, options: list[str]) -> subprocess.Popen:
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    return subprocess.Popen([cli, "ingest", "--input", str(data), "--topic", topic, "--bootstrap-servers", bootstrap,
                             "--metrics-dir", str(tmp / "metrics"), "--run-id", topic, "--master", "local[2]",
                             "--delivery", "exactly-once", "--quiet", *options],
                            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip


# Long: the run, the moment its sending starts, both profilers, and what they found, in order.
def _profiled(data: Path, bootstrap: str, tmp: Path, out: Path, seconds: float, options: list[str]) -> dict:
    admin = Admin(bootstrap)
    run = _ingest(data, "profile", bootstrap, tmp, options)
    try:
        deadline = time.monotonic() + 300
        while sum(admin.end_offsets("profile", 2.0).values()) == 0:  # the first records: sending began
            if run.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("bench --profile: the run ended or never sent before it could be profiled")
            time.sleep(0.05)
        jvm, worker = _processes(run.pid)
        spy = subprocess.Popen([_tool("py-spy") or "py-spy", "record", "--native", "-r", "250", "-d", str(round(seconds)),
                                "-f", "raw", "-o", str(out / "worker.py-spy.txt"), "-p", str(worker)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        perf = subprocess.run(["perf", "record", "-F", "499", "-p", str(jvm), "-o", str(tmp / "jvm.perf.data"),
                               "--", "sleep", str(seconds)], capture_output=True, timeout=seconds + 60)  # fmt: skip
        subprocess.run(["jcmd", str(jvm), "Compiler.perfmap"], capture_output=True, timeout=30)
        spy_err, _ = spy.communicate(timeout=seconds + 60)
        if spy.returncode != 0:
            raise RuntimeError(
                f"bench --profile: py-spy failed ({spy.returncode}) on worker {worker}: {spy_err.decode()[-500:]}"
            )
    finally:
        run.wait(600)
        admin.close()
    report = subprocess.run(["perf", "report", "-i", str(tmp / "jvm.perf.data"), "--no-children", "--sort",
                             "dso,symbol", "--stdio", "--percent-limit", "0.3"], capture_output=True, text=True)  # fmt: skip
    (out / "jvm.perf-report.txt").write_text(report.stdout)
    return {
        "jvm": {"pid": jvm, "recorded": perf.returncode == 0, "top": _perf_top(report.stdout)},
        "worker": {
            "pid": worker,
            "top_self": _spy_top(out / "worker.py-spy.txt", leaf=True),
            "top_total": _spy_top(out / "worker.py-spy.txt", leaf=False),
        },
        "commands": {
            "worker": f"py-spy record --native -r 250 -d {round(seconds)} -f raw -p WORKER_PID",
            "jvm": f"perf record -F 499 -p JVM_PID -- sleep {seconds}; jcmd JVM_PID Compiler.perfmap; "
            "perf report --no-children --sort dso,symbol --stdio",
        },
    }


def _processes(root: int) -> tuple[int, int]:
    """The run's Spark JVM and its busiest Python worker (over a fifth of a second)."""
    groups: dict[str, list[psutil.Process]] = {}
    for p in psutil.Process(root).children(recursive=True):
        try:
            groups.setdefault(group_of(p, root), []).append(p)
        except psutil.Error:  # ended meanwhile
            continue
    workers = groups.get(PYTHON_WORKERS, [])
    before = {p.pid: _cpu(p) for p in workers}
    time.sleep(0.2)
    busiest = max(workers, key=lambda p: _cpu(p) - before[p.pid])
    return groups[SPARK_JVM][0].pid, busiest.pid


def _cpu(p: psutil.Process) -> float:
    try:
        return sum(p.cpu_times()[:2])
    except psutil.Error:
        return 0.0


def _spy_top(raw: Path, leaf: bool) -> list[tuple[str, float]]:
    """The functions py-spy saw most, by their own samples (``leaf``) or with their callees."""
    counts: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [f.split(" (")[0] for f in stack.split(";")]
        total += int(n)
        for f in [frames[-1]] if leaf else set(frames):
            counts[f] += int(n)
    return [(f, round(100 * c / total, 1)) for f, c in counts.most_common(TOP)] if total else []


def _perf_top(report: str) -> list[tuple[str, float]]:
    top = []
    for line in report.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith("%") and not line.startswith("#"):
            top.append((" ".join(parts[1:]), float(parts[0].rstrip("%"))))
    return top[:TOP]


def _markdown(found: dict) -> str:
    lines = [
        f"`{found['command']}`: {found['rows']:,} rows of {found['input']}, {found['seconds']} s of the sending window",
        "",
    ]
    for title, rows in (("Python worker, own time", found["worker"]["top_self"]),
                        ("Python worker, with callees", found["worker"]["top_total"]),
                        ("Spark JVM, own time (perf)", found["jvm"]["top"])):  # fmt: skip
        lines += [f"### {title}", "", "| % | function |", "| --: | --- |"]
        lines += [f"| {pct} | `{name}` |" for name, pct in rows]
        lines.append("")
    lines += [f"- {k}: `{v}`" for k, v in found["commands"].items()]
    return "\n".join(lines) + "\n"
