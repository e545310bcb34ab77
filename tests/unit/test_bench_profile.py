"""bench --profile's reading of its profilers' output: py-spy's raw stacks and perf's report."""

from __future__ import annotations

from kappa_ingest.bench.profile import _perf_top, _spy_top

RAW = """\
main (w.py:1);encode (records.py:10);memcpy (libc.so.6) 60
main (w.py:1);parse (parsing.py:5) 30
main (w.py:1);encode (records.py:10) 10
"""

REPORT = """\
# Overhead  Shared Object       Symbol
# ........  ..................  ......
#
    41.20%  libjvm.so           [.] SpinPause
    12.50%  perf-4242.map       [.] Interpreter
     3.10%  [kernel.kallsyms]   [k] clear_page_erms
"""


def test_py_spy_stacks_are_counted_by_own_time_and_with_callees(tmp_path):
    raw = tmp_path / "w.txt"
    raw.write_text(RAW)
    assert _spy_top(raw, leaf=True) == [("memcpy", 60.0), ("parse", 30.0), ("encode", 10.0)]
    assert _spy_top(raw, leaf=False)[:2] == [("main", 100.0), ("encode", 70.0)]


def test_perf_s_report_lines_are_read_and_its_comments_skipped():
    assert _perf_top(REPORT) == [
        ("libjvm.so [.] SpinPause", 41.2),
        ("perf-4242.map [.] Interpreter", 12.5),
        ("[kernel.kallsyms] [k] clear_page_erms", 3.1),
    ]
