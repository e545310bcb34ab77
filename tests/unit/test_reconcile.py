"""Reconciliation: the topic's account of a run, from offsets when they balance exactly,
else from a read_committed consumer's count of the run's own records."""

from __future__ import annotations

from collections import Counter

from kappa_ingest.delivery import reconcile
from kappa_ingest.source.splits import Unit


def found(**by_run):
    return reconcile.ReadBack(Counter({(run, "/in/a.csv"): n for run, n in by_run.items()}))


def test_commit_markers_are_part_of_the_expected_growth():
    assert reconcile.expected_growth(100, [2, 1]) == 103
    assert reconcile.expected_growth(100, []) == 100
    assert reconcile.expected_growth(100, [2, -1]) is None  # a producer that could not count its partitions


def test_offsets_that_balance_exactly_verify_the_run():
    v = reconcile.check("exactly-once", 100, 103, 103, 0, None, "r", {})
    assert v.verified_by == "offsets" and all(ok for _, ok, _, _ in v.checks)
    assert "3 commit markers" in v.checks[0][0]
    v = reconcile.check("exactly-once", 100, 102, 103, 0, None, "r", {})
    assert not v.checks[0][1]


def test_exactly_once_read_back_wants_every_record_once_and_ignores_other_producers():
    ok = reconcile.check("exactly-once", 100, 999, None, 0, found(r=100, live=899), "r", {"/in/a.csv": 100})
    assert all(c[1] for c in ok.checks) and ok.duplicates == 0 and ok.verified_by.startswith("read back")
    twice = reconcile.check("exactly-once", 100, 999, None, 1, found(r=103, live=896), "r", {"/in/a.csv": 100})
    assert not twice.checks[0][1]
    lost = reconcile.check("exactly-once", 100, 999, None, 0, found(r=97), "r", {"/in/a.csv": 100})
    assert not lost.checks[0][1]


def test_a_duplicate_and_a_loss_do_not_cancel_out():
    # Three rows of one file twice and three of another missing: the totals balance.
    back = reconcile.ReadBack(Counter({("r", "/a"): 53, ("r", "/b"): 47}))
    v = reconcile.check("exactly-once", 100, 100, None, 0, back, "r", {"/a": 50, "/b": 50})
    assert not v.checks[0][1] and v.duplicates == 3 and v.duplicates_by_file == {"/a": 3}
    # Within one file, unit by unit: unit u1 committed twice (its second copy lies outside the
    # offsets its transaction wrote), unit u2 lost; the file's count balances.
    u1, u2 = (Unit("/a", 0, 10),), (Unit("/a", 10, 10),)
    sent = {u1: 5, u2: 5}
    in_place = reconcile.ReadBack(Counter({("r", "/a"): 10}), Counter({u1: 5}))
    v = reconcile.check("exactly-once", 10, 10, None, 0, in_place, "r", {"/a": 10}, sent)
    assert v.checks[0][1] and not v.checks[1][1]
    assert (
        v.checks[1][2] == "2 units in 2 transactions" and v.checks[1][3] == "1 differ (/a [10, 20): 0 of 5 rows there)"
    )
    whole = reconcile.ReadBack(Counter({("r", "/a"): 10}), Counter(sent))
    assert all(
        ok for _, ok, _, _ in reconcile.check("exactly-once", 10, 10, None, 0, whole, "r", {"/a": 10}, sent).checks
    )
    # A task's transaction over shuffled input holds several units: its offsets hold their rows together.
    both = (u1[0], u2[0])
    together = reconcile.check("exactly-once", 10, 10, None, 0, reconcile.ReadBack(Counter({("r", "/a"): 10}),
                               Counter({both: 10})), "r", {"/a": 10}, {both: 10})  # fmt: skip
    assert together.checks[1] == (
        reconcile.UNIT_BY_UNIT,
        True,
        "2 units in 1 transactions",
        "2 units in 1 transactions",
    )


def test_records_are_told_apart_by_the_offsets_their_units_transactions_wrote():
    u1, u2 = (Unit("/a", 0, 10),), (Unit("/a", 10, 10), Unit("/b", 0, 10))
    where = reconcile._index({u1: [(0, 100, 5), (1, 7, 2)], u2: [(0, 105, 3)]})
    assert reconcile._units_at(where, 0, 100) == u1 and reconcile._units_at(where, 0, 104) == u1
    assert reconcile._units_at(where, 0, 105) == u2 and reconcile._units_at(where, 0, 107) == u2
    assert reconcile._units_at(where, 0, 108) is None and reconcile._units_at(where, 0, 99) is None
    assert reconcile._units_at(where, 1, 8) == u1 and reconcile._units_at(where, 2, 8) is None


def test_at_least_once_counts_duplicates_of_retried_tasks_and_refuses_others():
    retried = reconcile.check("at-least-once", 100, 120, 100, 2, found(r=120), "r", {"/in/a.csv": 100})
    assert all(c[1] for c in retried.checks)
    assert retried.duplicates == 20 and retried.duplicates_by_file == {"/in/a.csv": 20}
    unexplained = reconcile.check("at-least-once", 100, 120, 100, 0, found(r=120), "r", {"/in/a.csv": 100})
    assert not all(c[1] for c in unexplained.checks)
    lost = reconcile.check("at-least-once", 100, 90, 100, 1, found(r=90), "r", {"/in/a.csv": 100})
    assert not lost.checks[0][1]


def test_a_resumed_lineage_holds_every_row_of_its_files():
    back = reconcile.ReadBack(Counter({("run1", "/a"): 60, ("run2", "/a"): 40, ("run2", "/b"): 50, ("x", "/a"): 7}))
    runs = {"run1", "run2"}
    assert all(c[1] for c in reconcile.check_lineage("exactly-once", back, runs, {"/a": 100, "/b": 50}).checks)
    assert not reconcile.check_lineage("exactly-once", back, runs, {"/a": 90, "/b": 50}).checks[0][1]
    twice = reconcile.check_lineage("at-least-once", back, runs, {"/a": 90, "/b": 50})
    assert twice.checks[0][1] and twice.duplicates == 10 and twice.duplicates_by_file == {"/a": 10}
    assert not reconcile.check_lineage("at-least-once", back, runs, {"/a": 101, "/b": 50}).checks[0][1]


def test_a_resumed_lineages_duplicates_are_the_ones_the_consumer_found_in_every_mode():
    back = reconcile.ReadBack(Counter({("run1", "/a"): 60, ("run2", "/a"): 45, ("run2", "/b"): 45}))
    runs = {"run1", "run2"}
    # 105 of /a's 100 rows and 45 of /b's 50: the totals balance, the files do not.
    verdict = reconcile.check_lineage("exactly-once", back, runs, {"/a": 100, "/b": 50})
    assert not verdict.checks[0][1]
    assert verdict.duplicates == 5 and verdict.duplicates_by_file == {"/a": 5}
