"""The choices a run's settings are checked against: sinks, delivery modes (and which a
sink and its producer settings allow), quality gates, and the defaults."""

from __future__ import annotations

import re
from typing import Any

from kappa_ingest.errors import UsageError

SINKS = ("confluent", "spark", "kafka-python")
DEFAULT_SINK = "confluent"  # the fastest in `make bench` (docs/performance.md)
ON_CHANGED = ("refuse", "resend")
VERIFY = ("auto", "read-back")
GATES = ("fail", "quarantine", "warn")  # what a failed --expectations suite does
DEFAULT_LEDGER_TOPIC = "_kappa_ingest_ledger"
AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
MODES = (AT_LEAST_ONCE, EXACTLY_ONCE)
TRANSACTIONAL_SINKS = ("confluent", "kafka-python")
# What --delivery is when not given, for a sink that can do it (docs/delivery.md).
DEFAULT_MODE = EXACTLY_ONCE


def resolve_mode(requested: str | None, sink: str, settings: dict[str, str]) -> str:
    """The run's delivery mode; UsageError for a mode its sink or settings cannot keep.

    Unasked, it is exactly-once where the sink and the producer settings allow (``acks=all``,
    idempotence), else at-least-once."""
    if requested is None:
        if sink in TRANSACTIONAL_SINKS and DEFAULT_MODE == EXACTLY_ONCE and not _transactions_ruled_out(settings):
            return EXACTLY_ONCE
        return AT_LEAST_ONCE
    if requested not in MODES:
        raise UsageError(f"--delivery {requested!r}: accepted: {', '.join(MODES)}")
    if requested == EXACTLY_ONCE and sink not in TRANSACTIONAL_SINKS:
        raise UsageError(
            f"--delivery exactly-once: the {sink} sink (Spark's own Kafka writer) cannot write Kafka transactions;"
            f" use --sink {' or --sink '.join(TRANSACTIONAL_SINKS)}, or --delivery at-least-once"
        )
    if requested == EXACTLY_ONCE and _transactions_ruled_out(settings):
        raise UsageError(f"--delivery exactly-once needs {_transactions_ruled_out(settings)}")
    return requested


def _transactions_ruled_out(settings: dict[str, str]) -> str | None:
    """What in the producer settings Kafka's transactions cannot work with, if anything."""
    if settings.get("acks", "all") not in ("all", "-1"):
        return f"acks=all (the settings have acks={settings['acks']})"
    if str(settings.get("enable.idempotence", "true")).lower() != "true":
        return "enable.idempotence=true"
    return None


def parse_size(text: Any, option: str = "--max-bytes") -> int:
    """``2G``, ``500MB``, ``1.5 GiB`` or a number of bytes (units of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if m is None or float(m[1]) <= 0:
        raise UsageError(f"{option} {text!r}: expected a size such as 500M, 2G or a number of bytes")
    return int(float(m[1]) * 1024 ** ("KMGT".find(m[2].upper()) + 1 if m[2] else 0))
