"""Discovery on a real directory: inotify wakes the watch when a file lands, long before
the next full listing would; a file is handed over only once still for its minimum age."""

from __future__ import annotations

import os
import threading
import time

from kappa_ingest.watch.discovery import Discovery, _watched


def _in_background(call):
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", call()), daemon=True)
    thread.start()
    return thread, out


def test_a_file_renamed_into_the_directory_wakes_the_watch_before_its_next_listing(tmp_path):
    landing, elsewhere = tmp_path / "landing", tmp_path / "tmp"
    landing.mkdir(), elsewhere.mkdir()
    (elsewhere / "a.csv").write_text("id\n1\n")
    with Discovery(str(landing), min_age_s=0.0, period_s=3600.0) as discovery:
        assert discovery.ready(wait_s=0.0) == []  # nothing yet: none, and no waiting for it
        thread, out = _in_background(lambda: discovery.ready(wait_s=120.0))
        for _ in range(2000):  # until it has listed the empty directory and waits (bounded: 20 s)
            if discovery.listings == 2:
                break
            time.sleep(0.01)
        os.rename(elsewhere / "a.csv", landing / "a.csv")  # as a writer should: written elsewhere, renamed in
        thread.join(130)
    # Woken by the rename: waiting for the next listing (in an hour) it would have ended with none after 120 s.
    assert [f.path for f in out["value"]] == [str(landing / "a.csv")] and discovery.listings == 3


def test_a_burst_of_renames_is_listed_once_it_is_over_not_at_its_first_file(tmp_path):
    """A backlog moved in (here 40 renames 2 ms apart) is handed over whole, as one batch,
    not as its first file and then the rest."""
    landing, elsewhere = tmp_path / "landing", tmp_path / "tmp"
    landing.mkdir(), elsewhere.mkdir()
    for i in range(40):
        (elsewhere / f"{i:02d}.csv").write_text("id\n1\n")
    with Discovery(str(landing), min_age_s=0.0, period_s=3600.0) as discovery:
        thread, out = _in_background(lambda: discovery.ready(wait_s=120.0))
        for _ in range(2000):  # until it has listed the empty directory and waits (bounded: 20 s)
            if discovery.listings == 1:
                break
            time.sleep(0.01)
        for i in range(40):
            os.rename(elsewhere / f"{i:02d}.csv", landing / f"{i:02d}.csv")
            time.sleep(0.002)
        thread.join(130)
    assert len(out["value"]) == 40 and discovery.listings == 2


def test_a_file_still_growing_is_listed_again_when_it_would_be_old_enough(tmp_path):
    (tmp_path / "a.csv").write_text("id\n1\n")
    with Discovery(str(tmp_path), min_age_s=0.5, period_s=3600.0) as discovery:
        found = discovery.ready(wait_s=60.0)  # seen at once, not ready: looked at again 0.5 s later
    assert [f.path for f in found] == [str(tmp_path / "a.csv")] and discovery.listings == 2


def test_files_the_watch_had_nothing_to_do_with_are_no_reason_to_list_again(tmp_path):
    """An idle watch over files it sent and kept waits for a change (here a new file), not
    listing the same files over and over; reading a file is not a change."""
    (tmp_path / "sent.csv").write_text("id\n1\n")
    with Discovery(str(tmp_path), min_age_s=0.0, period_s=3600.0) as discovery:
        assert [f.path for f in discovery.ready(wait_s=0.0)] == [str(tmp_path / "sent.csv")]
        thread, out = _in_background(lambda: discovery.ready(wait_s=120.0, changed=True))
        time.sleep(0.5)
        (tmp_path / "sent.csv").read_bytes()  # a batch reading it: inotify says so, nothing changed
        time.sleep(0.5)
        assert thread.is_alive() and discovery.listings == 2  # the two calls' first listings; the read woke none
        (tmp_path / "new.csv").write_text("id\n2\n")
        thread.join(130)
    assert [os.path.basename(f.path) for f in out["value"]] == ["new.csv", "sent.csv"]


def test_a_glob_is_watched_from_the_directory_its_wildcards_start_in():
    assert _watched("/in/day-*.csv") == ("/in", False)
    assert _watched("/in/*/x.csv") == ("/in", True)
    assert _watched("file:///in/") == ("/in/", False)
