"""Kappa replay: the history a topic was given, sent again into a new topic version.

    kappa-ingest reprocess --from-topic orders --runs R1,R2 --to-topic orders.v2 ...

The delivery ledger knows which files (and which of their splits) each run delivered to
``--from-topic`` and when; :func:`select` picks them by run, by delivery time or by an
explicit ``--input``, and says which cannot be re-sent and why (gone, or changed since).
The new topic is created like the old one (:func:`topic_settings`): its partition count,
replication and topic configs, unless given. The run itself is an ordinary ingest into the
new topic; :func:`compare` then reads both topics back (``read_committed``, the run's
own read-back) and sets them side by side: records per partition, first and last event time.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kappa_ingest.config import IngestConfig
from kappa_ingest.config.choices import DEFAULT_LEDGER_TOPIC
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.kafka.retention import past_retention
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.s3.access import is_s3
from kappa_ingest.source import opening
from kappa_ingest.source.records import wall_clock_ms
from kappa_ingest.source.splits import canonical_file


@dataclass(frozen=True)
class Replay:
    """What a reprocess run replays, and what it cannot."""

    from_topic: str
    selected_by: str  # "runs" | "delivery time" | "input" | "everything" (all the ledger shows delivered)
    runs: tuple[str, ...]  # the runs whose deliveries are replayed
    files: tuple[str, ...]  # to send again
    not_resent: tuple[dict[str, Any], ...] = ()  # {file, rows, reason}
    rows_delivered: int = 0  # rows the ledger shows delivered from the files re-sent

    def to_json(self) -> dict[str, Any]:
        return {
            "from_topic": self.from_topic,
            "selected_by": self.selected_by,
            "runs": list(self.runs),
            "files": len(self.files),
            "rows_delivered_before": self.rows_delivered,
            "not_resent": list(self.not_resent),
        }


def parse_time(text: str, what: str) -> int:
    """``2026-11-01`` or ``2026-11-01T06:00:00[Z|+01:00]`` (UTC unless it says) as epoch ms."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise UsageError(
            f"{what} {text!r}: expected a date or ISO time, e.g. 2026-11-01 or 2026-11-01T06:00:00Z"
        ) from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def select(
    entries: list[Entry],
    from_topic: str,
    runs: tuple[str, ...] = (),
    since: str | None = None,
    until: str | None = None,
    inputs: tuple[str, ...] = (),
    resend_changed: bool = False,
) -> Replay:
    """The files to replay: delivered to ``from_topic`` by one of ``runs`` (or a run they
    resumed), or between ``since`` and ``until`` (delivery time), or the ``inputs`` given;
    with none of these, every file the ledger shows delivered to it.
    A file gone, or changed since it was delivered (unless ``resend_changed``), is left out
    and listed with its reason; nothing left to send is an InputError."""
    mine = [e for e in entries if e.topic == from_topic and e.status == "delivered"]
    if inputs:
        from kappa_ingest.source.inputs import resolve_inputs

        paths, _ = resolve_inputs(inputs)
        wanted = {canonical_file(p) for p in paths}
        chosen = [e for e in mine if e.unit.file in wanted]
        by = "input"
    elif runs:
        chosen = [e for e in mine if e.run_id in runs or e.lineage in runs]
        by = "runs"
    elif not (since or until):
        chosen, by = mine, "everything"
    else:
        low = parse_time(since, "--since") if since else 0
        high = parse_time(until, "--until") if until else 2**62
        chosen = [e for e in mine if low <= e.delivered_at_ms < high]
        by = "delivery time"
    by_file: dict[str, list[Entry]] = {}
    for e in chosen:
        by_file.setdefault(e.unit.file, []).append(e)
    files, not_resent = [], []
    for path, es in sorted(by_file.items(), key=lambda kv: min(e.delivered_at_ms for e in kv[1])):
        rows = sum(e.rows_sent for e in es)
        why = _why_not(path, es[-1], resend_changed)
        if why:
            not_resent.append({"file": path, "rows": rows, "reason": why})
        else:
            files.append(path)
    if inputs:  # files given that the ledger never saw are sent too: they are history all the same
        files += sorted(wanted - set(by_file))
    if not files:
        what = {"input": f"--input {' '.join(inputs)}", "runs": f"--runs {','.join(runs)}",
                "delivery time": f"--since {since or '-'} --until {until or '-'}",
                "everything": "the ledger"}[by]  # fmt: skip
        gone = "; ".join(f"{n['file']} ({n['reason']})" for n in not_resent[:3])
        left = f"; left out: {gone}" if not_resent else ""
        raise InputError(f"nothing to replay: no delivered file to {from_topic} matches {what}{left}")
    replayed = {e.run_id for f in files for e in by_file.get(f, [])}
    delivered = sum(e.rows_sent for f in files for e in by_file.get(f, []))
    return Replay(from_topic, by, tuple(sorted(replayed)), tuple(files), tuple(not_resent), delivered)


def _why_not(path: str, last: Entry, resend_changed: bool) -> str | None:
    if is_s3(path):
        return _why_not_object(path, last, resend_changed)
    if "://" in path:
        return None  # a remote file: Spark finds out
    try:
        st = os.stat(path)
    except OSError:
        return "the file no longer exists"
    if not last.matches(st.st_size, st.st_mtime_ns // 1_000_000) and not resend_changed:
        return f"changed since delivered (size {last.file_size:,} -> {st.st_size:,} bytes, or its time)"
    return None


def _why_not_object(uri: str, last: Entry, resend_changed: bool) -> str | None:
    """An object delivered before, as its HEAD finds it now: gone, or another version."""
    from kappa_ingest.s3.objects import head
    from kappa_ingest.source.opening import store

    try:
        now = head(uri, store().access.quick())
    except InputError:
        return "the object no longer exists"
    if not last.matches(now.size, now.mtime_ms, now.etag) and not resend_changed:
        return f"changed since delivered (ETag {last.file_version or '-'} -> {now.etag}, size {now.size:,} bytes)"
    return None


def prepare(values: dict[str, Any], sized_on_command_line: bool) -> tuple[dict[str, Any], Replay]:
    """The settings of a reprocess run, its inputs chosen from the ledger, and a new topic
    shaped like the old one (unless ``--topic-partitions`` was given); before Spark starts."""
    from kappa_ingest.config import resolved_settings, run_ids
    from kappa_ingest.delivery import ledger
    from kappa_ingest.kafka.settings import DEFAULT_PRODUCER_SETTINGS, connection_conf
    from kappa_ingest.kafka.topics import Admin

    v = dict(values)
    runs = run_ids(v.get("runs"))
    inputs = tuple(v.get("inputs") or ())
    ways = [bool(runs), bool(v.get("since") or v.get("until")), bool(inputs)]
    if sum(ways) > 1:  # none: all the ledger shows delivered to --from-topic
        raise UsageError("reprocess: choose the history with one of --runs ID,..., --since/--until or --input")
    servers = v.get("bootstrap_servers")
    if not servers or not v.get("from_topic"):
        raise UsageError("reprocess reads the delivery ledger of --from-topic's cluster: give --bootstrap-servers")
    settings = {**DEFAULT_PRODUCER_SETTINGS, **resolved_settings(v.get("kafka_opts") or {})}
    entries = ledger.read(connection_conf(settings, servers), str(v.get("ledger_topic") or DEFAULT_LEDGER_TOPIC))
    opening.for_run(v.get("s3_endpoint"))  # objects replayed are checked as they are now
    replay = select(entries, v["from_topic"], runs, v.get("since"), v.get("until"), inputs)
    with Admin(servers, settings) as admin:
        partitions, replicas, configs = topic_settings(admin, v["from_topic"])
    v.update(inputs=list(replay.files), runs=runs, topic_config=configs)
    if not sized_on_command_line:
        v.update(topic_partitions=partitions, replication_factor=replicas)
    return v, replay


def topic_settings(admin: Any, topic: str) -> tuple[int, int, dict[str, str]]:
    """``(partitions, replication factor, topic configs set on it)`` of an existing topic."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    md = admin.client.list_topics(topic=topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        raise InputError(f"--from-topic {topic}: no such topic on this cluster")
    replicas = max(len(p.replicas) for p in md.partitions.values())
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.client.describe_configs([resource])[resource].result(10)
    configs = {k: v.value for k, v in described.items() if v.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return len(md.partitions), replicas, configs


def compare(admin: Any, conf: dict[str, Any], old: str, runs: tuple[str, ...], new: str, run_id: str) -> dict[str, Any]:
    """Both topics side by side, as a read_committed consumer sees them: the old topic's
    records of the replayed runs, and the new topic's of this run, per partition (count,
    first and last record timestamp, which is the event time with --event-time-column)."""
    from confluent_kafka import OFFSET_BEGINNING

    from kappa_ingest.delivery.reconcile import read_back
    from kappa_ingest.source.records import iso_ms

    def side(topic: str, run_ids: tuple[str, ...], end: dict[int, int]) -> dict[str, Any]:
        found = read_back(conf, topic, dict.fromkeys(end, OFFSET_BEGINNING), end, set(run_ids), by_partition=True)
        parts = {p: {"records": n, "first_event": iso_ms(first), "last_event": iso_ms(last)}
                 for p, (n, first, last) in sorted(found.partitions.items())}  # fmt: skip
        spans = found.partitions.values()
        return {"topic": topic, "records": sum(n for n, _, _ in spans), "partitions": parts,
                "first_event": iso_ms(min(f for _, f, _ in spans)) if parts else None,
                "last_event": iso_ms(max(last for _, _, last in spans)) if parts else None}  # fmt: skip

    # Both read at once: a read back waits on fetches as much as it counts (the C loop lets go of the GIL).
    with ThreadPoolExecutor(2) as pool:
        ends = admin.end_offsets(old), admin.end_offsets(new)
        old_side, new_side = pool.submit(side, old, runs, ends[0]), pool.submit(side, new, (run_id,), ends[1])
        return {"old": old_side.result(), "new": new_side.result()}


@dataclass(frozen=True)
class Compared:
    """Both topics of a replay compared: the old topic's records of the replayed runs beside
    the new topic's of this run; a warning if the broker is about to delete them."""

    sides: dict[str, Any]
    retention_warning: str | None

    @property
    def new_records(self) -> int:
        return self.sides["new"]["records"]


def check_replay(cfg: IngestConfig, replay: Replay, conf: dict) -> Compared:
    """The old topic's records of the replayed runs beside the new topic's of this run."""
    with Admin(conf["bootstrap.servers"], cfg.producer_settings()) as admin:
        sides = compare(admin, conf, replay.from_topic, replay.runs, cfg.topic, cfg.run_id)
        doomed = past_retention(admin, cfg.topic, sides["new"]["first_event"], wall_clock_ms())
    if doomed:  # a replay that succeeds and whose records the broker then deletes must say so
        print(f"kappa-ingest: warning: {doomed}", file=sys.stderr)
    return Compared(sides, doomed)
