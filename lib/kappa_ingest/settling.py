"""Waiting for something that settles within milliseconds (commit markers after a commit,
Spark's listener bus after a job): asked again soon, then less and less often."""

from __future__ import annotations

from collections.abc import Iterator

FIRST_S, LONGEST_S = 0.01, 0.2


def pauses(first_s: float = FIRST_S, longest_s: float = LONGEST_S) -> Iterator[float]:
    """The waits between one asking and the next: doubling from ``first_s`` up to ``longest_s``."""
    pause = first_s
    while True:
        yield pause
        pause = min(pause * 2, longest_s)
