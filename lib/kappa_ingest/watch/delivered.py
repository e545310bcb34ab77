"""What the ledger says of a landing's files: the watch's only state.

Read in full once when the watch starts, then on from where the last reading ended after
each batch. A file is sent when the ledger holds an entry for each of its units, of the
file as it is now (size, modification time, an object's ETag: ``Entry.matches``); a file
all of whose units are in is kept as its identity alone (three numbers, not its entries),
so that memory grows with the files sent, not with their units.

The first start of a watch on a landing writes a ``watch`` record, and one ``passed``
record for each file found there (unless ``--include-existing``): a restart (there is a
``watch`` record) sends what landed while the watch was down, and passes over the same
files the first start did. Nothing else is remembered between starts.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from kappa_ingest import failpoints
from kappa_ingest.delivery import incremental, ledger
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.source.splits import InputFile, Unit, canonical_file, splittable
from kappa_ingest.watch.landing import Landed

Identity = tuple[int, int, str]  # size, modification time (ms), an object's ETag
FIRST_READ_TIMEOUT_S = 900.0  # the whole ledger, at a watch's start (a million entries: see docs)


class Gone:
    """Files sent and then gone from the landing (moved or deleted after they were sent, or
    not there when the watch starts), each kept as a 16-byte digest of its path and
    identity rather than its entry: one that comes back unchanged is known sent, a new
    file at its path is new. 16 bytes a file: a million files sent, 16 MB."""

    MERGE_AT = 65_536  # digests kept in a set until merged into the sorted arrays (or a quarter of their size)

    def __init__(self) -> None:
        # A digest's two halves, sorted by the first then the second: integers sort fast.
        self._hi = np.empty(0, dtype=np.uint64)
        self._lo = np.empty(0, dtype=np.uint64)
        self._recent: set[bytes] = set()

    @staticmethod
    def _digest(path: str, identity: Identity) -> bytes:
        size, mtime_ms, version = identity
        return hashlib.blake2b(f"{path}\0{size}\0{mtime_ms}\0{version}".encode(), digest_size=16).digest()

    def add(self, path: str, identity: Identity) -> None:
        self._recent.add(self._digest(path, identity))
        if len(self._recent) >= max(self.MERGE_AT, len(self._hi) // 4):  # merges of a growing array: few
            self._merge()

    def _merge(self) -> None:
        halves = np.frombuffer(b"".join(self._recent), dtype=">u8").astype(np.uint64).reshape(-1, 2)
        hi, lo = np.concatenate([self._hi, halves[:, 0]]), np.concatenate([self._lo, halves[:, 1]])
        order = np.lexsort((lo, hi))
        hi, lo = hi[order], lo[order]
        first = np.ones(len(hi), dtype=bool)  # each digest once (the ledger may name a file twice)
        first[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
        self._hi, self._lo = hi[first], lo[first]
        self._recent = set()

    def __contains__(self, item: tuple[str, Identity]) -> bool:
        d = self._digest(*item)
        if d in self._recent:
            return True
        hi, lo = int.from_bytes(d[:8], "big"), int.from_bytes(d[8:], "big")
        first = int(np.searchsorted(self._hi, np.uint64(hi), "left"))
        last = int(np.searchsorted(self._hi, np.uint64(hi), "right"))
        return bool((self._lo[first:last] == np.uint64(lo)).any())

    def __len__(self) -> int:
        return len(self._hi) + len(self._recent)


@dataclass(frozen=True)
class Standing:
    """Where one landed file stands: ``new`` (nothing of it sent), ``partial`` (some units
    in, the rest to send with ``delivered`` skipped), ``sent``, ``changed`` (sent as
    ``before``, different now), or ``passed`` (there at the first start, passed over)."""

    file: InputFile
    state: str
    before: Identity | None = None


def input_file(f: Landed, multiline: bool) -> InputFile:
    """A landed file as the ledger names it."""
    path = f.path if f.path.startswith("s3://") else canonical_file(f.path)
    return InputFile(path, f.size, f.mtime_ms, splittable(path, multiline), f.version)


def _key(kind: str, topic: str, name: str, value: str) -> bytes:
    return json.dumps({kind: topic, name: value}, separators=(",", ":")).encode()


class Delivered:
    """The ledger's view of ``topic``'s files, kept up to date by :meth:`catch_up`."""

    def __init__(self, conf: dict[str, Any], ledger_topic: str, topic: str, landing: str, multiline: bool) -> None:
        self.conf, self.ledger_topic, self.topic, self.landing = conf, ledger_topic, topic, landing
        self.multiline = multiline
        self.position: dict[int, int] | None = None  # where the last reading ended
        self.started_ms: int | None = None  # the watch's first start on this landing
        self._sent: dict[str, Identity] = {}
        self._open: dict[str, dict[Unit, Entry]] = {}  # files with entries, not (yet) all units in
        self._passed: dict[str, Identity] = {}
        self.gone = Gone()
        self._there: set[str] | None = None  # while a start reads the ledger: the landing's files
        self.records_read = 0
        self._rows_settled: dict[str, int] = {}  # of the files the last reading found wholly in
        self._reader: ledger.Reader | None = None  # kept between readings: its connections warm

    def close(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            reader.close()

    def catch_up(self, present: list[Landed] | None = None) -> None:
        """Read what the ledger gained since the last reading (the first reading: all of it,
        however long that takes while records keep coming). ``present``: the landing's files
        now (a start): a file sent in one unit and not among them is kept by its identity
        alone (:class:`Gone`) as it is read, so that a ledger of a million files gone from
        the landing costs a start 16 MB, not its entries."""
        touched: set[str] = set()
        self._rows_settled = {}
        self._there = None if present is None else {input_file(f, self.multiline).path for f in present}

        def take(r: ledger.Record) -> None:
            self._take(r, touched)

        if self._reader is not None:
            try:
                self._reader.read(take)
            except Exception:
                self.close()  # a new reader next time, from the position read to
                raise
            self.position = dict(self._reader.position)
        else:
            timeout_s = ledger.READ_TIMEOUT_S if self.position is not None else FIRST_READ_TIMEOUT_S
            self.position = ledger.read_on(self.conf, self.ledger_topic, self.position, take, timeout_s)
            if any(self.position.values()):  # a ledger there to read on (not one still to be made)
                self._reader = ledger.Reader(self.conf, self.ledger_topic, self.position)
        for path in touched:
            if path in self._open:
                self._settle(path)
        self._there = None

    def _take(self, r: ledger.Record, touched: set[str]) -> None:
        self.records_read += 1
        if r.kind == ledger.ENTRY:
            e = ledger.entry_of(r)
            if e is not None and e.topic == self.topic:
                path = e.unit.file
                if e.unit.parts == 1 and e.unit.start == 0 and e.unit.length == e.file_size:
                    # A file in one unit (most of a landing's): in, as this version, at once.
                    self._open.pop(path, None)
                    identity = (e.file_size, e.file_mtime_ms, e.file_version)
                    if self._there is not None and path not in self._there:
                        self._sent.pop(path, None)
                        self.gone.add(path, identity)
                    else:
                        self._sent[path] = identity
                        self._rows_settled[path] = e.rows_sent
                else:
                    self._open.setdefault(path, {})[e.unit] = e
                    touched.add(path)
        elif r.kind in (ledger.WATCH, ledger.PASSED) and r.value is not None:
            key = ledger.key_object(r)
            value = json.loads(r.value)
            if r.kind == ledger.WATCH and key == {"watch": self.topic, "landing": self.landing}:
                self.started_ms = self.started_ms or int(value["since_ms"])
            elif r.kind == ledger.PASSED and key.get("passed") == self.topic:
                self._passed[key["file"]] = (value["size"], value["mtime_ms"], value.get("version", ""))

    def _settle(self, path: str) -> None:
        """A file whose every unit is in, as of one identity, kept as that identity alone."""
        entries = self._open[path]
        latest = max(entries.values(), key=lambda e: e.delivered_at_ms)
        f = InputFile(path, latest.file_size, latest.file_mtime_ms, splittable(path, self.multiline),
                      latest.file_version)  # fmt: skip
        if incremental.classify([f], list(entries.values()), self.topic).done:
            del self._open[path]
            if self._there is not None and path not in self._there:
                self.gone.add(path, f.identity())
                return
            self._sent[path] = f.identity()
            self._rows_settled[path] = sum(e.rows_sent for e in entries.values() if e.matches(*f.identity()))

    def rows_of(self, path: str) -> int:
        """The rows of a file the last :meth:`catch_up` found wholly in the topic (else 0)."""
        return self._rows_settled.get(path, 0)

    def standing(self, f: Landed) -> Standing:
        """Where ``f`` stands, by the ledger as last read."""
        file = input_file(f, self.multiline)
        if (file.path, file.identity()) in self.gone:  # sent, gone, and back as it was
            return Standing(file, "sent", file.identity())
        sent = self._sent.get(file.path)
        if sent is not None:
            return Standing(file, "sent" if sent == file.identity() else "changed", sent)
        entries = self._open.get(file.path)
        if entries:
            b = incremental.classify([file], list(entries.values()), self.topic)
            if b.done:
                return Standing(file, "sent", file.identity())
            if b.changed:
                e = b.changed[0][1]
                return Standing(file, "changed", (e.file_size, e.file_mtime_ms, e.file_version))
            return Standing(file, "partial" if b.partial else "new")
        if self._passed.get(file.path) == file.identity():
            return Standing(file, "passed")
        return Standing(file, "new")

    def forget(self, f: Landed) -> None:
        """``f``, sent and now gone from the landing (moved or deleted after it was sent): its
        identity alone kept (:class:`Gone`)."""
        path = input_file(f, self.multiline).path
        sent = self._sent.pop(path, None)
        if sent is not None:
            self.gone.add(path, sent)

    def entries(self, paths: list[str]) -> list[Entry]:
        """The entries of files not all of whose units are in (what a batch completing them skips)."""
        return [e for p in paths for e in self._open.get(p, {}).values()]

    def first_start(self, found: list[Landed], include_existing: bool, by: str) -> None:
        """At a watch's first start on this landing (no ``watch`` record yet): pass over the
        files there now (unless ``include_existing``), then record the start. The passed
        records go first: a start killed between the two passes over them again."""
        if self.started_ms is not None:
            return
        now = time.time_ns() // 1_000_000
        if not include_existing:
            passed = [input_file(f, self.multiline) for f in found]
            ledger.write_records(self.conf, self.ledger_topic, [
                (_key("passed", self.topic, "file", f.path),
                 json.dumps({"size": f.size, "mtime_ms": f.mtime_ms, "version": f.version, "by": by}).encode())
                for f in passed], kind=ledger.PASSED)  # fmt: skip
            self._passed.update((f.path, f.identity()) for f in passed)
        failpoints.hold(failpoints.WATCH_PASSED, by)
        ledger.write_records(self.conf, self.ledger_topic, [
            (_key("watch", self.topic, "landing", self.landing), json.dumps({"since_ms": now, "by": by}).encode())
        ], kind=ledger.WATCH)  # fmt: skip
        self.started_ms = now

    def sizes(self) -> dict[str, int]:
        return {"sent": len(self._sent), "open": len(self._open), "passed": len(self._passed), "gone": len(self.gone)}
