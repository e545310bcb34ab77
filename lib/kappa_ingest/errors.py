"""Errors for people: each carries the exit code of contract §1 and a one-line message
naming the cause and the fix. They are mapped to exit codes in one place, ``cli.main``."""

from __future__ import annotations


class KappaError(Exception):
    """Anything else that stops a run (exit 1)."""

    exit_code = 1
    status = "failed"


class UsageError(KappaError):
    """Bad usage or configuration (exit 2)."""

    exit_code = 2


class InputError(KappaError):
    """Input missing or unreadable (exit 3)."""

    exit_code = 3


class KafkaUnavailable(KappaError):
    """Kafka unreachable, unauthorised or refusing (exit 4)."""

    exit_code = 4


class QualityGateFailed(KappaError):
    """The data-quality gate failed (exit 5)."""

    exit_code = 5


class LockHeld(KappaError):
    """Another run holds the topic's ledger lock (exit 6)."""

    exit_code = 6


class LockLost(KappaError):
    """Another run took this run's topic over, or its units, while it ran (exit 6): what
    it sent is in the topic once, the rest is the other run's (or the next run's)."""

    exit_code = 6


def first_line(e: BaseException) -> str:
    """An error's message's first line (its type's name if it has none)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
