"""Whether the broker is about to delete records a run just sent: a topic's time retention
counts from each record's timestamp, which is its event time where a run gives one."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def past_retention(admin: Any, topic: str, oldest: str | None, now_ms: int) -> str | None:
    """Why the broker will soon delete records just sent to ``topic``, or None: they carry
    their event time as their timestamp (``CreateTime``), and the ``oldest`` of them
    (ISO-8601) is older than the topic's ``retention.ms``, which counts from the timestamp."""
    if not oldest:
        return None
    retention = admin.topic_setting(topic, "retention.ms")
    if retention is None or int(retention) < 0:
        return None
    oldest_ms = round(datetime.fromisoformat(oldest.replace("Z", "+00:00")).timestamp() * 1000)
    if now_ms - oldest_ms <= int(retention):
        return None
    if admin.topic_setting(topic, "message.timestamp.type") == "LogAppendTime":  # (asked only then: a round trip)
        return None
    return (f"{topic} keeps records for retention.ms {int(retention):,} ms ({int(retention) / 86_400_000:.3g} days)"
            f" counted from their timestamp, their event time here, the oldest {oldest}: the broker deletes those"
            f" older than that within minutes; keep them with kafka-configs.sh --alter --entity-type topics"
            f" --entity-name {topic} --add-config retention.ms=-1")  # fmt: skip
