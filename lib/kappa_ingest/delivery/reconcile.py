"""Does the topic hold what the run says it sent?

Two ways to know, the cheap one first:

- offsets: the topic's high watermarks grew by ``rows_sent`` plus one commit marker per
  partition each committed transaction wrote to (markers take offsets too). Exact, and
  free, when nothing else wrote to the topic during the run, no attempt failed and the C
  producer loop counted the partitions it wrote.
- read back: otherwise a ``read_committed`` consumer reads the topic between the run's
  first and last offsets and counts the records whose ``run_id`` header names this run
  (or, for a resumed run, the runs it continues), per source file, and per unit where the
  run knows the offsets its unit's transaction wrote (see "Unit by unit" below). Other producers' records, aborted transactions and markers do not
  count; a unit sent twice does, and so does one missing: in every mode the report's
  duplicates are the ones the consumer found.

Unit by unit: the C producer loop notes, from its delivery reports, the offsets each
transaction's records were written to (a transaction is one unit; over shuffled input, or
at-least-once, a task's units together). The read-back counts the run's records inside
those offsets, and each transaction must find there exactly the rows its units' ledger
entries say: records moved, missing or written by another transaction show.

:func:`check` is pure: it turns the counts into the report's checks.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kappa_ingest.errors import KafkaUnavailable
from kappa_ingest.kafka.topics import LOG
from kappa_ingest.source.splits import Unit, canonical_file

# Where each transaction's records landed, (partition, first offset, count) runs, by the units it delivered.
Located = dict[tuple[Unit, ...], list[tuple[int, int, int]]]

READ_BACK_TIMEOUT_S = 120.0


@dataclass
class ReadBack:
    """Records per (run_id, source_file) found by a read_committed consumer."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    by_transaction: Counter[tuple[Unit, ...]] = field(default_factory=Counter)  # inside each one's offsets, if given
    seconds: float = 0.0
    # With by_partition: [records, first timestamp ms, last timestamp ms] per partition.
    partitions: dict[int, list[int]] = field(default_factory=dict)

    def of(self, run_ids: set[str]) -> int:
        return sum(n for (rid, _), n in self.counts.items() if rid in run_ids)

    def by_file(self, run_ids: set[str]) -> Counter[str]:
        out: Counter[str] = Counter()
        for (rid, file), n in self.counts.items():
            if rid in run_ids:
                out[file] += n
        return out


def _span(partitions: dict[int, list[int]], p: int, ts: int) -> None:
    s = partitions.get(p)
    if s is None:
        partitions[p] = [1, ts, ts]
    else:
        s[0] += 1
        s[1], s[2] = min(s[1], ts), max(s[2], ts)


# Long: one consumer loop whose stop rules (end offsets, EOF, deadline) must be read together.
def read_back(
    conf: dict[str, Any],
    topic: str,
    start: dict[int, int],
    end: dict[int, int],
    run_ids: set[str],
    timeout_s: float = READ_BACK_TIMEOUT_S,
    by_partition: bool = False,
    located: Located | None = None,
) -> ReadBack:
    """Count the committed records of ``run_ids`` in ``topic`` between offsets ``start``
    and ``end`` (per partition; a start of ``OFFSET_BEGINNING`` reads from the first kept);
    ``by_partition`` also their count and first and last timestamp per partition; ``located``
    (where each transaction's records landed) also the records found inside each one's offsets.
    KafkaUnavailable if the end is not reached in time (a transaction another producer
    left open holds read_committed consumers back)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    began = time.monotonic()
    wanted = {r.encode() for r in run_ids}
    where = _index(located or {})
    todo = {p for p, e in end.items() if e > start.get(p, 0)}
    out = ReadBack()
    if not todo:
        return out
    settings = {k: v for k, v in conf.items() if k != "logger"}
    if all(isinstance(v, str | int | float | bool) for v in settings.values()):
        from kappa_ingest import native

        try:
            reader = native.Reader({**settings, **_READER, "enable.partition.eof": "true"}, sorted(wanted))
        except native.NativeUnavailable:
            pass
        else:
            try:
                raw = _read_in_c(reader, topic, start, end, todo, sorted(wanted), began + timeout_s, out, by_partition,
                                 where, timeout_s)  # fmt: skip
            finally:
                reader.close()
            return _counted(out, raw, began)
    consumer = Consumer({**conf, **_READER, "enable.partition.eof": True, "logger": LOG})
    try:
        consumer.assign([TopicPartition(topic, p, start.get(p, 0)) for p in todo])
        deadline = began + timeout_s
        raw: Counter[tuple[bytes, bytes]] = Counter()
        while todo:
            if time.monotonic() > deadline:
                raise KafkaUnavailable(
                    f"could not read topic {topic!r} back to its end in {timeout_s:.0f} s to count this run's records"
                    f" (partitions {sorted(todo)}: a transaction another producer left open?)"
                )
            for m in consumer.consume(10_000, timeout=0.05):  # consume() waits out its timeout unless the batch fills
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= end[m.partition()]:
                            todo.discard(m.partition())
                        continue
                    raise KafkaUnavailable(f"reading topic {topic!r} back: {err.str()}")
                p = m.partition()
                if m.offset() >= end[p]:
                    todo.discard(p)
                    continue
                headers = dict(m.headers() or ())
                rid = headers.get("run_id")
                if rid in wanted:
                    raw[(rid, headers.get("source_file", b""))] += 1
                    if by_partition:
                        _span(out.partitions, p, m.timestamp()[1])
                    if where:
                        units = _units_at(where, p, m.offset())
                        if units is not None:
                            out.by_transaction[units] += 1
                if m.offset() + 1 >= end[p]:
                    todo.discard(p)
        consumer.unassign()
    finally:
        consumer.close()
    return _counted(out, raw, began)


# A start below the first offset kept (records deleted, or past retention) reads from the
# first kept: the records gone are then missing from the count, as they are from the topic
# (librdkafka's default would jump to the end and miss every record kept, too).
_READER = {"group.id": "kappa-ingest-read-back", "enable.auto.commit": False, "isolation.level": "read_committed",
           "fetch.max.bytes": 64 << 20, "auto.offset.reset": "earliest"}  # fmt: skip


def _counted(out: ReadBack, raw: Counter[tuple[bytes, bytes]], began: float) -> ReadBack:
    for (rid, file), n in raw.items():  # files by the ledger's name for them, as sent_by_file has them
        out.counts[(rid.decode(), canonical_file(file.decode()))] += n
    out.seconds = round(time.monotonic() - began, 3)
    return out


def _read_in_c(
    reader: Any,
    topic: str,
    start: dict[int, int],
    end: dict[int, int],
    todo: set[int],
    wanted: list[bytes],
    deadline: float,
    out: ReadBack,
    by_partition: bool,
    where: dict[int, tuple[list[int], list[tuple[int, tuple[Unit, ...]]]]],
    timeout_s: float,
) -> Counter[tuple[bytes, bytes]]:
    """read_back's loop over c/consume.c's arrays (the same rules, a batch of records at a time)."""
    import numpy as np
    import pyarrow as pa

    raw: Counter[tuple[bytes, bytes]] = Counter()
    reader.assign(topic, {p: start.get(p, 0) for p in todo})
    end_of = np.zeros(max(end) + 1, dtype=np.int64)
    for p, e in end.items():
        end_of[p] = e
    while todo:
        if time.monotonic() > deadline:
            raise KafkaUnavailable(
                f"could not read topic {topic!r} back to its end in {timeout_s:.0f} s to count this run's records"
                f" (partitions {sorted(todo)}: a transaction another producer left open?)"
            )
        try:
            got = reader.poll(50)
        except RuntimeError as e:
            raise KafkaUnavailable(f"reading topic {topic!r} back: {e.args[-1]}") from e
        if not len(got.offset):
            continue
        ends = end_of[got.partition]
        record = got.rid != -2
        # A partition is done at its end's event past the end, or at its last record.
        done = (~record & (got.offset >= ends)) | (record & (got.offset + 1 >= ends))
        todo.difference_update(np.unique(got.partition[done]).tolist())
        mine = record & (got.offset < ends) & (got.rid >= 0)
        if not mine.any():
            continue
        rids, parts, offsets, stamps = got.rid[mine], got.partition[mine], got.offset[mine], got.timestamp[mine]
        keys = pa.table({"rid": rids, "file": got.files.filter(pa.array(mine))})
        for row in keys.group_by(["rid", "file"]).aggregate([([], "count_all")]).to_pylist():
            raw[(wanted[row["rid"]], row["file"])] += row["count_all"]
        for p in np.unique(parts).tolist():
            at = parts == p
            if by_partition:
                span = out.partitions.setdefault(p, [0, int(stamps[at].min()), int(stamps[at].max())])
                span[0] += int(at.sum())
                span[1], span[2] = min(span[1], int(stamps[at].min())), max(span[2], int(stamps[at].max()))
            if p in where:
                firsts, rest = where[p]
                i = np.searchsorted(np.asarray(firsts), offsets[at], side="right") - 1
                stops = np.asarray([stop for stop, _ in rest] + [0])
                inside = (i >= 0) & (offsets[at] < stops[i])
                for j, n in zip(*np.unique(i[inside], return_counts=True), strict=True):
                    out.by_transaction[rest[int(j)][1]] += int(n)
    return raw


def _index(located: Located) -> dict[int, tuple[list[int], list[tuple[int, tuple[Unit, ...]]]]]:
    """Per partition, the runs' first offsets in order, with each run's end and transaction."""
    runs = sorted((p, first, first + count, units) for units, rs in located.items() for p, first, count in rs)
    out: dict[int, tuple[list[int], list[tuple[int, tuple[Unit, ...]]]]] = {}
    for p, first, stop, units in runs:
        starts, rest = out.setdefault(p, ([], []))
        starts.append(first)
        rest.append((stop, units))
    return out


def _units_at(
    where: dict[int, tuple[list[int], list[tuple[int, tuple[Unit, ...]]]]], partition: int, offset: int
) -> tuple[Unit, ...] | None:
    found = where.get(partition)
    if found is None:
        return None
    starts, rest = found
    i = bisect.bisect_right(starts, offset) - 1
    if i < 0 or offset >= rest[i][0]:
        return None
    return rest[i][1]


def expected_growth(rows_sent: int, markers: list[int]) -> int | None:
    """How far the high watermarks move for ``rows_sent`` records and the committed
    transactions' markers (one number per transaction; -1: unknown); None if unknown."""
    if any(m < 0 for m in markers):
        return None
    return rows_sent + sum(markers)


@dataclass(frozen=True)
class Verdict:
    """The outcome of one reconciliation, as the report records it."""

    checks: list[tuple[str, bool, Any, Any]]  # (name, ok, expected, actual)
    verified_by: str
    duplicates: int = 0
    duplicates_by_file: dict[str, int] = field(default_factory=dict)


def check(
    mode: str,
    rows_sent: int,
    offset_delta: int,
    growth: int | None,
    failed_attempts: int,
    found: ReadBack | None,
    run_id: str,
    sent_by_file: dict[str, int],
    sent_by_transaction: dict[tuple[Unit, ...], int] | None = None,
) -> Verdict:
    """The broker's account of the run. With ``found`` (a read back) the run's own records
    decide, file by file and, for the transactions in ``sent_by_transaction`` (those whose
    offsets the run knows: their units' rows sent), unit by unit; without it the offsets
    must balance exactly (``growth``)."""
    if found is None:
        name = "topic grew by rows_sent" + (f" + {growth - rows_sent} commit markers" if growth != rows_sent else "")
        return Verdict([(name, offset_delta == growth, growth, offset_delta)], "offsets")
    mine = found.of({run_id})
    by_file = found.by_file({run_id})
    files = set(by_file) | set(sent_by_file)
    extra = {f: by_file[f] - sent_by_file.get(f, 0) for f in files if by_file.get(f, 0) > sent_by_file.get(f, 0)}
    short = {f: sent_by_file[f] - by_file.get(f, 0) for f in files if by_file.get(f, 0) < sent_by_file.get(f, 0)}
    duplicates = sum(extra.values())
    how = f"read back: {mine:,} records of this run counted by a read_committed consumer in {found.seconds:.1f} s"
    checks: list[tuple[str, bool, Any, Any]]
    if mode == "exactly-once":
        checks = [("a read_committed consumer finds exactly rows_sent records of this run, file by file",
                   not extra and not short, rows_sent, mine)]  # fmt: skip
    else:
        checks = [("a read_committed consumer finds every row sent, file by file", not short, f">= {rows_sent}", mine)]
        if duplicates:
            checks.append(("records sent twice only by retried tasks", failed_attempts > 0, "failed attempts > 0",
                           failed_attempts))  # fmt: skip
    if sent_by_transaction:
        checks.append(unit_by_unit(mode, sent_by_transaction, found))
    return Verdict(checks, how, duplicates, extra)


UNIT_BY_UNIT = "each unit's records are where its producer wrote them, unit by unit"


def unit_by_unit(mode: str, sent: dict[tuple[Unit, ...], int], found: ReadBack) -> tuple[str, bool, Any, Any]:
    """The check that each transaction's offsets hold its units' rows: how many differ, and the first."""
    units = sum(len(g) for g in sent)
    whole = f"{units} units in {len(sent)} {'transactions' if mode == 'exactly-once' else 'producers'}"
    off = [(g, n, found.by_transaction.get(g, 0)) for g, n in sent.items() if found.by_transaction.get(g, 0) != n]
    if not off:
        return UNIT_BY_UNIT, True, whole, whole
    g, n, got = off[0]
    first = f"{g[0].label()}{f' and {len(g) - 1} more units' if len(g) > 1 else ''}: {got:,} of {n:,} rows there"
    return UNIT_BY_UNIT, False, whole, f"{len(off)} differ ({first})"


def check_lineage(mode: str, found: ReadBack, lineage_runs: set[str], rows_by_file: dict[str, int]) -> Verdict:
    """A resumed run's end-to-end check: every file of the original input is in the topic
    once per row (exactly-once), or at least once (at-least-once, with the duplicates the
    runs of the lineage sent counted by file), across the runs of its lineage."""
    by_file = found.by_file(lineage_runs)
    got, want = sum(by_file.values()), sum(rows_by_file.values())
    how = (
        f"read back: {got:,} records of the resumed runs counted by a read_committed consumer in {found.seconds:.1f} s"
    )
    # In either mode the duplicates are the ones the consumer found, file by file.
    extra = {f: n - rows_by_file.get(f, 0) for f, n in by_file.items() if n > rows_by_file.get(f, 0)}
    duplicates = sum(extra.values())
    if mode == "exactly-once":
        ok = got == want and all(by_file.get(f, 0) == n for f, n in rows_by_file.items())
        name = "every row of the original input is in the topic exactly once (all runs of the lineage)"
        return Verdict([(name, ok, want, got)], how, duplicates, extra)
    ok = all(by_file.get(f, 0) >= n for f, n in rows_by_file.items())
    name = "every row of the original input is in the topic (all runs of the lineage)"
    return Verdict([(name, ok, f">= {want}", got)], how, duplicates, extra)
