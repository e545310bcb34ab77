"""The daemons kappa-ingest starts (Kafka brokers, a Spark master and workers): each leads
a process group of its own and is stopped by the PID recorded when it started."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); it is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def signal_group(pid: int, sig: int) -> None:
    """``sig`` to the process group ``pid`` leads (the JVM and anything it started)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


# A SIGKILLed JVM takes a moment to go (its memory is torn down first): how long to wait.
KILL_WAIT_S = 10.0


def stop(pids: Sequence[int], timeout_s: float) -> None:
    """SIGTERM to each, in order; SIGKILL to any still alive after ``timeout_s``; gone
    (or a zombie) and reaped when it returns."""
    for pid in pids:
        signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    for pid in pids:
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        reap(pid)
