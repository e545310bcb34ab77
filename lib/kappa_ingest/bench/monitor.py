"""CPU seconds and peak resident memory of a command's whole process tree (the JVM, its
Python workers, their producers), sampled a few times a second with psutil."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass

import psutil


@dataclass
class Usage:
    returncode: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str


def run_measured(
    cmd: list[str], env: dict[str, str] | None = None, timeout_s: float = 1800, cwd: str | None = None
) -> Usage:
    """Run ``cmd`` to completion; its tree's CPU time (last reading of every process seen)
    and the peak of its summed RSS."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    cpu: dict[int, float] = {}
    peak = 0.0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            rss = 0
            for p in procs:
                try:
                    t = p.cpu_times()
                    cpu[p.pid] = t.user + t.system
                    rss += p.memory_info().rss
                except psutil.Error:
                    continue
            peak = max(peak, rss / 2**20)
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        done.set()
        sampler.join(5)
        if proc.poll() is None:
            proc.kill()
    return Usage(proc.returncode, time.monotonic() - started, round(sum(cpu.values()), 2), round(peak, 1), out, err)


def cpu_seconds(pid: int) -> float:
    """CPU seconds so far of one process (the broker's, read before and after a run)."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system
