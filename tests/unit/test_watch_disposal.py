"""What becomes of a landed file: kept, deleted or moved once sent, each step idempotent
(a watch killed before it runs it again at its next start); an unsendable file moved to the
error directory with its reason; and the watch's options refused where they make no sense."""

from __future__ import annotations

import argparse

import pytest

from kappa_ingest.errors import UsageError
from kappa_ingest.watch import disposal
from kappa_ingest.watch.landing import Landed
from kappa_ingest.watch.settings import add_watch_arguments, watch_settings


def _landed(path) -> Landed:
    st = path.stat()
    return Landed(str(path), st.st_size, st.st_mtime_ns // 1_000_000)


def test_after_send_keeps_deletes_or_moves_and_doing_it_twice_is_doing_it_once(tmp_path):
    landing, sent = tmp_path / "landing", tmp_path / "sent"
    landing.mkdir()
    for name in ("k.csv", "d.csv", "m.csv"):
        (landing / name).write_text("id\n1\n")
    k, d, m = (_landed(landing / n) for n in ("k.csv", "d.csv", "m.csv"))
    assert disposal.after_send(k, "keep") is None and (landing / "k.csv").exists()
    assert disposal.after_send(d, "delete") == "deleted" and not (landing / "d.csv").exists()
    assert disposal.after_send(d, "delete") == "deleted"  # gone already: nothing to do, no error
    assert disposal.after_send(m, f"move:{sent}") == f"moved to {sent}"
    assert (sent / "m.csv").read_text() == "id\n1\n" and not (landing / "m.csv").exists()
    disposal.after_send(m, f"move:{sent}")  # moved before a crash: not moved twice, not an error
    assert (sent / "m.csv").read_text() == "id\n1\n"


def test_an_unsendable_file_goes_to_the_error_dir_with_its_reason_beside_it(tmp_path):
    (tmp_path / "bad.csv").write_bytes(b"\x00\x01")
    where = disposal.to_error_dir(
        _landed(tmp_path / "bad.csv"), "input bad.csv: not a text file", str(tmp_path / "err")
    )
    assert where == f"{tmp_path}/err/bad.csv" and (tmp_path / "err" / "bad.csv").read_bytes() == b"\x00\x01"
    assert (tmp_path / "err" / "bad.csv.error.txt").read_text() == "input bad.csv: not a text file\n"
    assert not (tmp_path / "bad.csv").exists()


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_watch_arguments(p)
    return p.parse_args(argv)


def test_the_watch_options_are_typed_and_their_mistakes_named():
    s = watch_settings(
        _args("--after-send", "move:/done", "--min-file-age", "0", "--metrics-port", "0"), "/in", 5, "1G"
    )
    assert (s.move_to, s.min_file_age_s, s.max_files, s.max_bytes, s.metrics_host) == ("/done", 0.0, 5, 1 << 30,
                                                                                       "127.0.0.1")  # fmt: skip
    with pytest.raises(UsageError, match=r"--after-send 'move:': accepted: keep, delete, move:DIR"):
        watch_settings(_args("--after-send", "move:"), "/in", None, None)
    with pytest.raises(UsageError, match=r"--after-send 'archive'"):
        watch_settings(_args("--after-send", "archive"), "/in", None, None)
    with pytest.raises(UsageError, match=r"--listing-period 0: expected a positive number of seconds"):
        watch_settings(_args("--listing-period", "0"), "/in", None, None)
    with pytest.raises(UsageError, match=r"--metrics-port 70000"):
        watch_settings(_args("--metrics-port", "70000"), "/in", None, None)
