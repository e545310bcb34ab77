"""A watch forgets the files it sent once they are gone from its landing, keeping their
identities alone: one that comes back unchanged is still known sent, a new file at its
path is new. Fed the ledger's own records, as a watch reads them."""

from __future__ import annotations

import pytest

from kappa_ingest.delivery import ledger
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.source.splits import INCREMENTAL_SPLIT_BYTES, Unit
from kappa_ingest.watch.delivered import Delivered, Gone
from kappa_ingest.watch.landing import Landed

TOPIC = "landing"


def _record(
    offset: int, f: Landed, unit: Unit | None = None, split_bytes: int = INCREMENTAL_SPLIT_BYTES
) -> ledger.Record:
    unit = unit or Unit(f.path, 0, f.size, 0, 1)
    e = Entry(TOPIC, unit, f.size, f.mtime_ms, "r1", "r1", "exactly-once", 11, 10, 10, 0, unit.length - 100,
              split_bytes=split_bytes)  # fmt: skip
    key, value = e.record()
    return ledger.Record(offset, key, value, 0, ledger.ENTRY)


def _started(monkeypatch, records: list[ledger.Record], present: list[Landed]) -> Delivered:
    """A view as a watch's start makes it: the ledger's records handed over as its reader hands them."""

    def read_on(conf, topic, start, take, timeout_s):
        for r in records:
            take(r)
        return {0: len(records)}

    monkeypatch.setattr(ledger, "read_on", read_on)
    monkeypatch.setattr(ledger, "Reader", lambda *a: None)  # no reading on here
    view = Delivered({"bootstrap.servers": "127.0.0.1:1"}, "_ledger", TOPIC, "/landing", multiline=False)
    view.catch_up(present=present)
    return view


def _view(*files: Landed) -> Delivered:
    view = Delivered({"bootstrap.servers": "127.0.0.1:1"}, "_ledger", TOPIC, "/landing", multiline=False)
    for offset, f in enumerate(files):
        view._take(_record(offset, f), set())
    return view


def test_a_file_moved_away_is_forgotten_but_known_sent_if_it_comes_back_unchanged():
    a, b = Landed("/landing/a.csv", 2400, 1_000), Landed("/landing/b.csv", 3000, 2_000)
    view = _view(a, b)
    assert view.standing(a).state == "sent" and view.sizes()["sent"] == 2
    view.forget(a)
    assert view.sizes()["sent"] == 1 and view.sizes()["gone"] == 1
    assert view.standing(a).state == "sent"  # moved back, as it was: not sent again
    assert view.standing(Landed(a.path, 2400, 1_001)).state == "new"  # another file by that name
    assert view.standing(b).state == "sent"


def test_a_file_sent_in_two_units_and_gone_at_the_start_is_kept_by_its_identity_alone(monkeypatch):
    gone, there = Landed("/landing/big.csv", 2400, 1_000), Landed("/landing/big2.csv", 2400, 2_000)
    halves = [Unit(f.path, start, 1200) for f in (gone, there) for start in (0, 1200)]
    by_path = {gone.path: gone, there.path: there}
    records = [_record(i, by_path[u.file], u, split_bytes=1200) for i, u in enumerate(halves)]
    view = _started(monkeypatch, records, present=[there])
    assert view.sizes() == {"sent": 1, "open": 0, "passed": 0, "gone": 1}
    assert view.standing(gone).state == "sent" and view.standing(there).state == "sent"
    assert view.standing(Landed(gone.path, 1, 1)).state == "new"  # gone at the start: another file by its name
    assert view.standing(Landed(there.path, 1, 1)).state == "changed"  # there at the start: an overwrite


@pytest.mark.parametrize("merge_at", [1, 3, 1000])
def test_gone_digests_are_found_whether_merged_or_not(monkeypatch, merge_at):
    monkeypatch.setattr(Gone, "MERGE_AT", merge_at)
    gone = Gone()
    kept = [(f"/landing/x{i}.csv", (i, i * 7, "")) for i in range(200)]
    for path, identity in kept:
        gone.add(path, identity)
    assert len(gone) == 200
    assert all(item in gone for item in kept)
    assert ("/landing/x1.csv", (1, 8, "")) not in gone and ("/landing/y.csv", (1, 7, "")) not in gone


def test_gone_files_are_kept_in_16_bytes_each():
    gone = Gone()
    for i in range(200_000):
        gone.add(f"/landing/export-{i:07d}.csv", (2400, i, ""))
    assert len(gone) == 200_000
    assert gone._hi.nbytes + gone._lo.nbytes + 16 * len(gone._recent) <= 16 * 200_000
    assert ("/landing/export-0199999.csv", (2400, 199_999, "")) in gone
    assert ("/landing/export-0199999.csv", (2400, 1, "")) not in gone


def test_a_start_keeps_what_is_gone_from_the_landing_by_identity_as_it_reads_the_ledger(monkeypatch):
    files = [Landed(f"/landing/f{i}.csv", 2400 + i, 1_000 + i) for i in range(6)]
    view = _started(monkeypatch, [_record(offset, f) for offset, f in enumerate(files)], present=files[:2])
    assert view.sizes() == {"sent": 2, "open": 0, "passed": 0, "gone": 4}
    assert all(view.standing(f).state == "sent" for f in files)
    assert view.standing(Landed(files[0].path, 1, 1)).state == "changed"  # there at the start: an overwrite
    assert view.standing(Landed(files[5].path, 1, 1)).state == "new"  # gone at the start: a new file
