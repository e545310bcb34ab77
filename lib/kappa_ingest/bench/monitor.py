"""CPU seconds and peak resident memory of a command's whole process tree (the JVM, its
Python workers, their producers), sampled ten times a second with psutil; and each
process's CPU over time, by group, so that a window of the run (its sending, as the broker
saw it) can be charged to the processes that spent it."""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field

import psutil

SAMPLE_S = 0.1

# The groups a run's CPU is told by (issue 32: microseconds a row, by process).
BROKER = "broker"
SPARK_JVM = "Spark JVM"  # the driver's JVM (with the executors, under local[N])
EXECUTOR_JVM = "executor JVMs"  # local-cluster and standalone executors
PYTHON_WORKERS = "Python workers"
DRIVER_PYTHON = "driver Python"
PRODUCER_JVM = "producer JVM"  # Kafka's ProducerPerformance
LIBRDKAFKA = "librdkafka threads"  # the workers' producers' own threads (rdk:*), where asked apart
OTHER = "other"
# Not processes: the whole machine's busy CPU and the time its hypervisor gave to others
# (steal), read with every sample so a window can tell a run disturbed from outside.
MACHINE, STEAL = -1, -2


def process_group(cmdline: list[str]) -> str:
    """The group a process's CPU is counted in, from its command line as it is now (a
    launcher script's pid becomes the JVM it execs: asked again at every sample)."""
    program = cmdline[0].rsplit("/", 1)[-1] if cmdline else ""
    line = " ".join(cmdline)
    if program == "java":
        if "ProducerPerformance" in line:
            return PRODUCER_JVM
        if "CoarseGrainedExecutorBackend" in line:
            return EXECUTOR_JVM
        return BROKER if "kafka.Kafka" in cmdline else SPARK_JVM
    if program.startswith("python"):
        module = cmdline[cmdline.index("-m") + 1] if "-m" in cmdline[:-1] else ""
        return (
            PYTHON_WORKERS
            if module in ("pyspark.daemon", "pyspark.worker") or module.endswith("worker_daemon")
            else DRIVER_PYTHON
        )
    return OTHER


def group_of(p: psutil.Process, root: int) -> str:
    """A process's group in a command's tree: a Python process other than the command itself
    is one of Spark's Python workers, whatever its command line says (a worker of the
    event-time path showed none at all)."""
    group = process_group(p.cmdline() or [p.name()])
    return PYTHON_WORKERS if group == DRIVER_PYTHON and p.pid != root else group


# A process of the command's tree ("<pid>@<start>": a pid the kernel gives again to a later
# process, as it does once its counter wraps, is another key), or "<that>/rdk": its librdkafka
# threads, read apart from the rest of it; a process beside the command, by its pid.
Key = int | str


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Stat:
    """What a process's or thread's ``stat`` says of it: its name, its start in clock ticks
    since boot (fixed for its life, where psutil's create_time moves with the wall clock),
    and its CPU seconds."""

    name: str
    started: str
    cpu_s: float


def _stat(path: str) -> Stat | None:
    """None if it has ended."""
    try:
        with open(path) as f:
            head, _, rest = f.read().rpartition(")")  # (its name, in brackets, may hold ")")
    except OSError:
        return None
    fields = rest.split()  # from the 3rd field on: utime and stime are the 14th and 15th, the start the 22nd
    if len(fields) < 20:
        return None
    return Stat(head.partition("(")[2], fields[19], (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)


@dataclass
class CpuTimeline:
    """Each process's cumulative CPU seconds at each sample (wall-clock seconds, epoch)."""

    times: list[float] = field(default_factory=list)
    cpu: list[dict[Key, float]] = field(default_factory=list)
    groups: dict[Key, str] = field(default_factory=dict)

    def add(self, at: float, readings: dict[Key, float]) -> None:
        self.times.append(at)
        self.cpu.append(readings)

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds each group spent from ``t0`` to ``t1``: each process's cumulative CPU
        read at both ends, interpolated between the samples around them (a process not yet
        seen has spent nothing; one gone keeps its last reading)."""
        spent: dict[str, float] = {}
        for pid, group in self.groups.items():
            used = self._at(pid, t1) - self._at(pid, t0)
            spent[group] = spent.get(group, 0.0) + max(0.0, used)
        return {g: round(s, 3) for g, s in sorted(spent.items())}

    def machine_between(self, t0: float, t1: float) -> tuple[float, float]:
        """The machine's busy CPU seconds (every core, every process, the kernel) and its
        steal from ``t0`` to ``t1``."""
        return tuple(round(max(0.0, self._at(k, t1) - self._at(k, t0)), 3) for k in (MACHINE, STEAL))  # type: ignore[return-value]

    def _at(self, pid: Key, t: float) -> float:
        seen = [(at, r[pid]) for at, r in zip(self.times, self.cpu, strict=True) if pid in r]
        if not seen or t <= seen[0][0]:
            return 0.0 if not seen or t < seen[0][0] else seen[0][1]
        for (a, ca), (b, cb) in itertools.pairwise(seen):
            if a <= t <= b:
                return ca + (cb - ca) * (t - a) / (b - a) if b > a else cb
        return seen[-1][1]


@dataclass
class Usage:
    returncode: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str
    timeline: CpuTimeline = field(default_factory=CpuTimeline)


# Long: one sampler thread beside the command, its readings kept for the window asked later.
def run_measured(
    cmd: list[str],
    env: dict[str, str] | None = None,
    timeout_s: float = 1800,
    cwd: str | None = None,
    beside: dict[int, str] | None = None,
    threads: bool = False,
) -> Usage:
    """Run ``cmd`` to completion; its tree's CPU time (last reading of every process seen),
    the peak of its summed RSS, and every process's CPU over time; ``beside``: processes
    outside the tree sampled too (pid: group; the broker), not counted in ``cpu_s``;
    ``threads``: the Python workers' librdkafka threads told apart (:data:`LIBRDKAFKA`)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    timeline = CpuTimeline(groups=dict(beside or {}))
    cpu: dict[str, float] = {}
    peak = 0.0
    done = threading.Event()
    others = [psutil.Process(pid) for pid in beside or {}]
    producers = LibrdkafkaThreads()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            rss = 0
            readings: dict[Key, float] = {}
            for p in procs:
                try:
                    stat = _stat(f"/proc/{p.pid}/stat")
                    if stat is None:
                        continue  # ended
                    key = f"{p.pid}@{stat.started}"
                    timeline.groups[key] = group = group_of(p, proc.pid)
                    rdk = producers.cpu(p, key) if threads and group == PYTHON_WORKERS else None
                    cpu[key] = readings[key] = stat.cpu_s
                    if rdk is not None:  # read first: a worker gone meanwhile leaves neither reading
                        timeline.groups[f"{key}/rdk"] = LIBRDKAFKA
                        readings[f"{key}/rdk"] = rdk
                        readings[key] -= rdk
                    rss += p.memory_info().rss
                except psutil.Error:
                    continue
            for p in others:
                try:
                    t = p.cpu_times()
                    readings[p.pid] = t.user + t.system
                except psutil.Error:
                    continue
            readings[MACHINE], readings[STEAL] = machine_cpu()
            timeline.add(time.time(), readings)
            peak = max(peak, rss / 2**20)
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        done.set()
        sampler.join(5)
        if proc.poll() is None:
            proc.kill()
    return Usage(proc.returncode, time.monotonic() - started, round(sum(cpu.values()), 2), round(peak, 1), out, err,
                 timeline)  # fmt: skip


class LibrdkafkaThreads:
    """The CPU seconds of a process's librdkafka threads (named ``rdk:...``): a producer's
    broker threads batch, compress and wait on the broker beside the worker's own work. A
    thread that has ended keeps its last reading (a unit's producer closes with its commit;
    the process's own CPU still holds what it spent)."""

    def __init__(self) -> None:
        self._spent: dict[str, dict[str, float]] = {}  # a process's key -> its threads' (tid@start) CPU

    def cpu(self, p: psutil.Process, owner: str) -> float:
        """Of ``p``, keyed ``owner`` (its pid and start: see Key)."""
        spent = self._spent.setdefault(owner, {})
        try:
            tids = os.listdir(f"/proc/{p.pid}/task")
        except OSError:
            raise psutil.NoSuchProcess(p.pid) from None
        for tid in tids:
            t = _stat(f"/proc/{p.pid}/task/{tid}/stat")
            if t is None:
                continue  # ended meanwhile: its last reading stays
            key = f"{tid}@{t.started}"
            # (a thread is named once it runs: a name not yet librdkafka's is read again)
            if key in spent or t.name.startswith("rdk:"):
                spent[key] = t.cpu_s
        return sum(spent.values())


def machine_cpu() -> tuple[float, float]:
    """The machine's busy and stolen CPU seconds since boot (``/proc/stat``; busy leaves out
    idle, I/O wait and steal)."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + t.irq + t.softirq
    return busy, t.steal


def cpu_seconds(pid: int) -> float:
    """CPU seconds so far of one process (the broker's, read before and after a run)."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system
