"""Which files a replay sends again, from ledger entries alone."""

from __future__ import annotations

import os

import pytest

from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.reprocess import parse_time, select
from kappa_ingest.source.splits import Unit

DAY = 86_400_000
NOV1 = parse_time("2026-11-01", "--since")


def entry(path, run, day, rows=10, topic="orders", lineage=None, start=0):
    st = os.stat(path) if os.path.exists(path) else None
    size, mtime = (st.st_size, st.st_mtime_ns // 1_000_000) if st else (5, 5)
    return Entry(topic, Unit(str(path), start, 100), size, mtime, run, lineage or run, "exactly-once",
                 rows_sent=rows, delivered_at_ms=NOV1 + day * DAY)  # fmt: skip


@pytest.fixture
def files(tmp_path):
    out = []
    for name in ("a.csv", "b.csv", "c.csv"):
        (tmp_path / name).write_text("id\n1\n")
        out.append(tmp_path / name)
    return out


def test_by_run_a_resumed_run_counts_as_its_lineage_and_other_topics_are_ignored(files):
    a, b, c = files
    entries = [entry(a, "r1", 0), entry(b, "r2", 1, lineage="r1"), entry(c, "r3", 2),
               entry(c, "r1", 0, topic="other")]  # fmt: skip
    chosen = select(entries, "orders", runs=("r1",))
    assert chosen.files == (str(a), str(b)) and chosen.runs == ("r1", "r2") and chosen.rows_delivered == 20


def test_by_delivery_time_is_half_open_and_in_utc(files):
    a, b, c = files
    entries = [entry(a, "r1", 0), entry(b, "r2", 1), entry(c, "r3", 2)]
    assert select(entries, "orders", since="2026-11-02", until="2026-11-03").files == (str(b),)
    assert select(entries, "orders", since="2026-11-02T00:00:00+01:00").files == (str(b), str(c))


def test_a_file_gone_or_changed_is_listed_with_its_rows_and_reason(files):
    a, b, c = files
    entries = [entry(a, "r1", 0, rows=7), entry(a, "r1", 0, rows=3, start=100), entry(b, "r1", 0), entry(c, "r1", 0)]
    b.unlink()
    c.write_text("id\n1\n2\n")  # grew since it was delivered
    chosen = select(entries, "orders", runs=("r1",))
    assert chosen.files == (str(a),) and chosen.rows_delivered == 10
    reasons = {os.path.basename(n["file"]): (n["rows"], n["reason"]) for n in chosen.not_resent}
    assert reasons["b.csv"] == (10, "the file no longer exists")
    assert reasons["c.csv"][1].startswith("changed since delivered (size 5 -> 7 bytes")


def test_nothing_left_is_an_input_error_and_a_bad_date_a_usage_error(files):
    a, _, _ = files
    with pytest.raises(InputError, match="nothing to replay: no delivered file to orders matches --runs r9"):
        select([entry(a, "r1", 0)], "orders", runs=("r9",))
    with pytest.raises(UsageError, match="--since 'yesterday'"):
        select([entry(a, "r1", 0)], "orders", since="yesterday")


def test_no_selection_replays_all_the_ledger_shows_delivered_to_the_topic(files):
    """``reprocess --from-topic T --to-topic T2``, the shortest form: T's whole history."""
    a, b, c = files
    entries = [entry(a, "r1", 0), entry(b, "r2", 1), entry(c, "r3", 2, topic="other")]
    chosen = select(entries, "orders")
    assert chosen.selected_by == "everything" and chosen.files == (str(a), str(b)) and chosen.runs == ("r1", "r2")
    with pytest.raises(InputError, match="no delivered file to other2 matches the ledger"):
        select(entries, "other2")
