"""A TCP proxy that holds every byte for half a round trip each way: the lab's delay.

This kernel has no ``netem``, so a link's latency comes from a proxy in the path, as
Toxiproxy gives it (a broker advertised through its proxy). Bytes are queued with the
time they may leave, never held back by those before them beyond it, so a delay adds
latency without capping the rate (the queue holds a bandwidth-delay product). The round
trip is read from ``--control`` (milliseconds, as text) whenever that file changes, so a
test or a user changes it while the proxy runs.

    python -m kappa_ingest.lab.proxy --listen 10.77.0.1:19092 --to 10.77.0.1:9092 --rtt-ms 20 --control FILE
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from pathlib import Path

CHUNK = 1 << 16
QUEUED_CHUNKS = 2048  # 128 MB at most in flight each way: above a 1 Gbit/s link's product at 1 s
POLL_S = 0.1


def applied(control: Path) -> Path:
    """Where the proxy writes the round trip it applies, once it does."""
    return control.with_name(control.name + ".applied")


class Delay:
    """The round trip now, re-read from the control file when its modification time changes."""

    def __init__(self, rtt_ms: float, control: Path | None) -> None:
        self.one_way_s = rtt_ms / 2000
        self.control = control
        self._seen: tuple[int, int, int] | None = None

    def refresh(self) -> None:
        if self.control is None:
            return
        try:
            st = os.stat(self.control)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._seen:
                text = self.control.read_text().strip()
                if not text:
                    return  # being written: the next poll reads it
                self.one_way_s = float(text) / 2000
                self._seen = stamp
                applied(self.control).write_text(f"{text}\n")  # what Lab.delay waits for
        except (OSError, ValueError):
            pass  # being written: the next poll reads it


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUED_CHUNKS)

    async def take() -> None:
        while True:
            data = await reader.read(CHUNK)
            await queue.put((loop.time() + delay.one_way_s, data))
            if not data:
                return

    async def give() -> None:
        while True:
            due, data = await queue.get()
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    taking = asyncio.ensure_future(take())
    try:
        await give()
    finally:
        taking.cancel()


async def _connection(client_r, client_w, target: tuple[str, int], delay: Delay) -> None:  # type: ignore[no-untyped-def]
    try:
        server_r, server_w = await asyncio.open_connection(*target)
    except OSError:
        client_w.close()
        return
    try:
        await asyncio.gather(_forward(client_r, server_w, delay), _forward(server_r, client_w, delay))
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        for w in (client_w, server_w):
            w.close()


async def serve(listen: tuple[str, int], target: tuple[str, int], delay: Delay) -> None:
    server = await asyncio.start_server(lambda r, w: _connection(r, w, target, delay), *listen, reuse_address=True)
    async with server:
        while True:
            delay.refresh()
            await asyncio.sleep(POLL_S)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m kappa_ingest.lab.proxy", description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True, type=_address, metavar="HOST:PORT")
    p.add_argument("--to", required=True, type=_address, metavar="HOST:PORT")
    p.add_argument("--rtt-ms", type=float, default=0.0, help="the round trip it adds (default 0)")
    p.add_argument("--control", type=Path, help="a file holding the round trip in ms, read when it changes")
    args = p.parse_args(argv)
    delay = Delay(args.rtt_ms, args.control)
    if args.control is not None and not args.control.exists():
        args.control.write_text(f"{args.rtt_ms}\n")
    asyncio.run(serve(args.listen, args.to, delay))


if __name__ == "__main__":
    main()
