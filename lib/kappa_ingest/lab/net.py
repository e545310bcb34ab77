"""Hosts of their own on one machine: Linux network namespaces on one bridge.

Each host is a namespace with one interface (``eth0``, 10.77.0.N/24) whose other end sits
on a bridge inside a namespace of its own (the switch), so nothing of the lab touches the
machine's own network. A link is shaped where it meets the switch: its rate with ``tbf``
on both ends (this kernel has no ``netem``, so delay comes from :mod:`.proxy`), cut by
setting it down (a partition: the host is alive and unreachable), and two hosts are cut
off from each other alone by blackhole routes on both sides. Needs root.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kappa_ingest.errors import UsageError

PREFIX = "kl-"  # every lab namespace's name starts so: what `namespaces` and `remove` look for
SUBNET = "10.77.0"
IP = "/usr/sbin/ip" if Path("/usr/sbin/ip").exists() else "ip"
TC = "/usr/sbin/tc" if Path("/usr/sbin/tc").exists() else "tc"


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise UsageError(f"lab: {' '.join(args)}: {(done.stderr or done.stdout).strip() or done.returncode}")
    return done


@dataclass
class Net:
    """A lab's switch and hosts; ``hosts`` maps a host's name to its address."""

    lab_id: str
    hosts: dict[str, str] = field(default_factory=dict)

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.lab_id}-sw"

    def ns(self, host: str) -> str:
        return f"{PREFIX}{self.lab_id}-{host}"

    def _port(self, host: str) -> str:
        return f"p{self.lab_id}{host}"[:15]  # the host's link, on the switch's side

    def exec(self, host: str) -> list[str]:
        """The prefix that runs a command on ``host``."""
        return [IP, "netns", "exec", self.ns(host)]

    def add(self, host: str) -> str:
        """A new host on the switch; returns its address."""
        if host in self.hosts or not host.replace("-", "").isalnum() or len(host) > 6:
            raise UsageError(f"lab: host name {host!r}: new, letters and digits, at most 6 characters")
        address = f"{SUBNET}.{len(self.hosts) + 1}"
        ns, port = self.ns(host), self._port(host)
        _run(IP, "netns", "add", ns)
        self.hosts[host] = address
        _run(IP, "-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run(IP, "-n", self.switch, "link", "set", port, "master", "br0", "up")
        _run(IP, "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _run(IP, "-n", ns, "link", "set", "eth0", "up")
        _run(IP, "-n", ns, "link", "set", "lo", "up")
        return address

    def cut(self, host: str) -> None:
        """Partition ``host`` from every other: its link down, the host itself running on."""
        _run(IP, "-n", self.switch, "link", "set", self._port(host), "down")

    def restore(self, host: str) -> None:
        _run(IP, "-n", self.switch, "link", "set", self._port(host), "up")

    def cut_between(self, a: str, b: str) -> None:
        """``a`` and ``b`` can no longer reach each other; both still reach every other host."""
        for one, other in ((a, b), (b, a)):
            _run(IP, "-n", self.ns(one), "route", "replace", "blackhole", f"{self.hosts[other]}/32")

    def restore_between(self, a: str, b: str) -> None:
        for one, other in ((a, b), (b, a)):
            _run(IP, "-n", self.ns(one), "route", "del", "blackhole", f"{self.hosts[other]}/32", check=False)

    def shape(self, host: str, rate: str | None) -> None:
        """Limit ``host``'s link to ``rate`` (tc's units: ``1gbit``, ``100mbit``) both ways;
        None takes the limit off."""
        for ns, dev in ((self.switch, self._port(host)), (self.ns(host), "eth0")):
            if rate is None:
                _run(TC, "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
            else:  # a burst of at least a millisecond at the rate, as tbf wants on a fast link
                _run(TC, "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "1mb",
                     "latency", "50ms")  # fmt: skip

    @contextlib.contextmanager
    def inside(self, host: str) -> Iterator[None]:
        """Run the block on ``host``'s network: this thread (and the threads and processes it
        starts meanwhile, a Kafka client's among them) sees that host's addresses."""
        with (
            open(f"/proc/{os.getpid()}/task/{_thread_id()}/ns/net") as home,
            open(f"/run/netns/{self.ns(host)}") as there,
        ):
            _setns(there.fileno())
            try:
                yield
            finally:
                _setns(home.fileno())

    def to_json(self) -> dict:
        return asdict(self)


_CLONE_NEWNET = 0x40000000


def _thread_id() -> int:
    import threading

    return threading.get_native_id()


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns into a lab host's network (root needed)")


def create(lab_id: str | None = None) -> Net:
    """A new switch (a namespace holding a bridge), no hosts yet; ``lab_id``, if given, is
    four hex digits (as a made one is: a host's link name has room for no more) of no lab up."""
    if lab_id is not None and not re.fullmatch(r"[0-9a-f]{4}", lab_id):
        raise UsageError(f"lab: id {lab_id!r}: four hex digits")
    net = Net(lab_id or secrets.token_hex(2))
    _run(IP, "netns", "add", net.switch)  # fails if a lab of that id is up: nothing of it is touched
    try:
        _run(IP, "-n", net.switch, "link", "add", "br0", "type", "bridge")
        _run(IP, "-n", net.switch, "link", "set", "br0", "up")
    except BaseException:
        remove(net.lab_id)
        raise
    return net


def namespaces(lab_id: str | None = None) -> list[str]:
    """The lab namespaces that exist (of one lab, or of any)."""
    done = _run(IP, "netns", "list", check=False)
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    start = f"{PREFIX}{lab_id}-" if lab_id else PREFIX
    return [n for n in names if n.startswith(start)]


def remove(lab_id: str | None = None) -> list[str]:
    """Stop every process in the lab's namespaces (by PID) and delete them; returns them."""
    gone = namespaces(lab_id)
    for ns in gone:
        pids = _run(IP, "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for ns in gone:
        _run(IP, "netns", "del", ns, check=False)
    return gone
