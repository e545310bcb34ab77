"""A landing directory's rules: which names are a writer's scratch, when a file is still
long enough to send, what a listing of a directory or glob holds."""

from __future__ import annotations

import os

import pytest

from kappa_ingest.watch.landing import Landed, Settling, is_scratch, list_landed


@pytest.mark.parametrize(
    ("name", "scratch"),
    [("a.csv", False), ("a.csv.gz", False), (".a.csv", True), ("_a.csv", True), ("a.csv._COPYING_", True),
     ("a.csv.tmp", True), ("a.csv.filepart", True), ("a.csv.part", True), ("a.csv.crdownload", True),
     ("a.txt", True), ("a.csv.gz.tmp", True)],
)  # fmt: skip
def test_a_writers_scratch_names_and_other_files_are_passed_over(name, scratch):
    assert is_scratch(name) is scratch


def test_a_file_is_ready_once_its_size_and_time_have_held_for_the_minimum_age():
    settling = Settling(min_age_s=2.0)
    a, b = Landed("/in/a.csv", 10, 1000), Landed("/in/b.csv", 5, 1000)
    assert settling.ready([a, b], now=100.0) == []  # first seen: not yet still for 2 s
    grown = Landed("/in/a.csv", 20, 1500)  # still being written
    assert settling.ready([grown, b], now=101.0) == []
    assert settling.ready([grown, b], now=102.0) == [b]  # b still since 100
    assert settling.waiting(102.0) == [("/in/a.csv", 1.0)]
    assert settling.ready([grown, b], now=103.0) == [grown, b]
    assert settling.ready([b], now=104.0) == [b]  # a moved away: forgotten
    assert settling.ready([grown], now=104.5) == []  # back again: seen anew
    overwritten = Landed("/in/b.csv", 5, 1000, "other-etag")  # same size and time, another version
    assert settling.ready([overwritten], now=105.0) == []


def test_a_file_last_modified_long_enough_ago_is_ready_at_first_sight():
    settling = Settling(min_age_s=2.0)
    renamed_in = Landed("/in/old.csv", 10, 1_000_000)  # written at t=1000 s, renamed in later
    fresh = Landed("/in/new.csv", 10, 1_004_500)
    assert settling.ready([renamed_in, fresh], now=50.0, wall_s=1005.0) == [renamed_in]
    assert settling.waiting(50.0) == [("/in/new.csv", 0.0)]
    assert settling.ready([renamed_in, fresh], now=52.0, wall_s=1007.0) == [fresh, renamed_in]


def test_a_directory_lists_its_csv_files_but_not_scratch_names_or_subdirectories(tmp_path):
    for name in ("b.csv", "a.csv.gz", ".c.csv", "d.csv.tmp", "notes.txt"):
        (tmp_path / name).write_text("id\n1\n")
    (tmp_path / "sub.csv").mkdir()
    os.utime(tmp_path / "b.csv", ns=(0, 1_234_567_000_000))
    found = list_landed(str(tmp_path))
    assert [f.path for f in found] == [str(tmp_path / "a.csv.gz"), str(tmp_path / "b.csv")]
    assert found[1] == Landed(str(tmp_path / "b.csv"), 5, 1_234_567)
    assert [f.path for f in list_landed(f"file://{tmp_path}/*.csv")] == [str(tmp_path / "b.csv")]
    assert list_landed(str(tmp_path / "sub.csv")) == []  # empty: nothing yet, not an error
