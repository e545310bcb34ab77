"""Which files an --incremental run reads, from the ledger's entries (pure: no Kafka)."""

from __future__ import annotations

import pytest

from kappa_ingest.delivery.incremental import classify, select
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.errors import InputError
from kappa_ingest.source.splits import INCREMENTAL_SPLIT_BYTES, InputFile, Plan, Unit


def _entry(f: InputFile, start: int, length: int, split: int, topic: str = "t", size: int | None = None) -> Entry:
    return Entry(topic, Unit(f.path, start, length), size or f.size, f.mtime_ms, "r1", "r1", "exactly-once",
                 rows_sent=10, split_bytes=split)  # fmt: skip


OLD = InputFile("/in/old.csv", 1000, 1, True)
NEW = InputFile("/in/new.csv", 500, 3, True)
HALF = InputFile("/in/half.csv", 1000, 2, True)


def test_files_are_sorted_by_what_the_ledger_shows_for_this_topic():
    entries = [*(_entry(OLD, s, 250, 250) for s in range(0, 1000, 250)), _entry(HALF, 400, 400, 400),
               _entry(NEW, 0, 500, 1000, topic="another")]  # fmt: skip
    b = classify([NEW, HALF, OLD], entries, "t")
    assert b.done == [OLD] and b.new == [NEW] and [f for f, _ in b.partial] == [HALF]
    plan = dict(b.partial)[HALF]  # split as the run that half-delivered it did, not as this run would
    assert plan.split_bytes == 400 and set(b.delivered) == {Unit(HALF.path, 400, 400)}
    # Read with the half-delivered file's split size, the new file would be cut unlike any
    # other incremental run cuts it: it waits for the next run.
    chosen = select(b, "refuse", None, None)
    assert chosen.paths == [HALF.path] and chosen.plan == Plan((HALF,), 400, 1)
    assert chosen.summary["files_completed"] == 1 and chosen.summary["files_new"] == 0
    assert chosen.summary["files_left"] == 1


def test_a_half_delivered_file_cut_as_every_incremental_run_cuts_goes_with_the_new_ones():
    canonical = INCREMENTAL_SPLIT_BYTES
    big = InputFile("/in/big.csv", 3 * canonical, 2, True)
    b = classify([NEW, big], [_entry(big, canonical, canonical, canonical)], "t")
    chosen = select(b, "refuse", None, None)
    assert chosen.paths == [big.path, NEW.path] and chosen.plan == Plan((big, NEW), canonical, 1)


def test_a_changed_file_is_refused_or_resent_whole():
    b = classify([OLD], [_entry(OLD, 0, 900, 900, size=900)], "t")
    with pytest.raises(InputError, match=r"old\.csv \(size 900 -> 1,000"):
        select(b, "refuse", None, None)
    chosen = select(b, "resend", None, None)
    assert chosen.paths == [OLD.path] and chosen.delivered == {} and chosen.plan is None


def test_bounds_take_oldest_first_and_always_one_file():
    b = classify([NEW, OLD, HALF], [], "t")
    assert select(b, "refuse", 2, None).paths == [OLD.path, HALF.path]
    assert select(b, "refuse", None, 10).paths == [OLD.path]  # larger than the bound, but the backlog moves
    bounded = select(b, "refuse", None, 1500)  # the next file does not fit: nor does any later one
    assert bounded.paths == [OLD.path] and (bounded.summary["files_left"], bounded.summary["bytes_left"]) == (2, 1500)
