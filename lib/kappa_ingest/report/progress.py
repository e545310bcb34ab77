"""Live progress while a run sends: rows the broker holds out of the rows expected, the
current and one-minute rate, and the time left. A tqdm bar on a terminal; with ``--quiet``
or when output is not a terminal (scheduled jobs), one log line every 10 seconds.

Fed once a second by the broker-side sampler (:mod:`kappa_ingest.report.broker_rate`), so what it
counts is what Kafka acknowledged, not what the producers queued.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

LOG_EVERY_S = 10.0


class Progress:
    """Shows progress; ``update`` once per broker sample, ``close`` at the end."""

    def __init__(self, expected_rows: int | None, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.expected = expected_rows
        self.bar = None
        self.first_update: float | None = None
        self.settled_s = 0.0  # how long Kafka's one-minute rate has had to settle
        self.last_log = time.monotonic()
        if not quiet and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=expected_rows, unit=" rows", unit_scale=True, dynamic_ncols=True,
                            file=self.stream, desc="acknowledged", smoothing=0.3)  # fmt: skip

    def update(self, rows: int, rate: float, one_minute_rate: float) -> None:
        now = time.monotonic()
        if self.first_update is None:
            self.first_update = now
        self.settled_s = now - self.first_update
        if self.bar is not None:
            if self.expected is not None and rows > self.expected:
                self.bar.total = self.expected = rows
            self.bar.n = rows
            self.bar.set_postfix_str(
                f"{rate:,.0f}/s now, 1-min {one_minute_rate:,.0f}/s{self._warming()}", refresh=False
            )
            self.bar.refresh()
            return
        if now - self.last_log >= LOG_EVERY_S:
            self.last_log = now
            print(self.line(rows, rate, one_minute_rate), file=self.stream, flush=True)

    def line(self, rows: int, rate: float, one_minute_rate: float) -> str:
        of = ""
        eta = ""
        if self.expected:
            of = f" of ~{self.expected:,} ({min(100.0, 100 * rows / self.expected):.0f}%)"
            if rate > 0 and rows < self.expected:
                eta = f", about {(self.expected - rows) / rate:,.0f} s left"
        return (f"kappa-ingest: {rows:,}{of} rows acknowledged, {rate:,.0f} rows/s now,"
                f" one-minute rate {one_minute_rate:,.0f}{self._warming()}{eta}")  # fmt: skip

    def _warming(self) -> str:
        from kappa_ingest.report.broker_rate import warming_up

        return " (warming up)" if warming_up(self.settled_s) else ""

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
