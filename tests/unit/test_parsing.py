"""The fast path's line parser, against Python's csv module on the same lines."""

from __future__ import annotations

import csv
import io

import pyarrow as pa
import pytest

from kappa_ingest.source.columns import BLOCK_COL, FILE_COL, LINE_COL
from kappa_ingest.source.parsing import HeaderMismatch, LineParser, malformed_detail


def lines_batch(raw: list[bytes], file: str = "f.csv", block: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(raw, pa.binary()).view(pa.string()), pa.array([file] * len(raw)), pa.array([block] * len(raw))],
        names=[LINE_COL, FILE_COL, BLOCK_COL],
    )


def by_csv_module(lines: list[str], width: int) -> list[list[str | None]]:
    rows = [next(csv.reader(io.StringIO(line))) for line in lines if line]
    return [[v if v != "" else None for v in r] for r in rows if len(r) == width]


GOOD = ['1,"a,b",x', '2,"say ""hi""",', "3,,", '4,"",""', "5, sp ,é", '6,"🎉 ""x"", y",z']


def test_good_lines_match_the_csv_module():
    p = LineParser(("id", "name", "val"), header_line="id,name,val")
    out = p(lines_batch([b"id,name,val", *(line.encode() for line in GOOD)]))
    got = [[r[c] for c in ("id", "name", "val")] for r in out.rows.to_pylist()]
    assert got == by_csv_module(GOOD, 3)
    assert out.rejects.num_rows == 0 and out.skipped == 1 and out.rows_read == len(GOOD)
    assert out.rows.column(FILE_COL).to_pylist() == ["f.csv"] * len(GOOD)


def test_rejects_carry_reason_file_and_text():
    raw = [b"id,name,val", b"1,ok,x", b"2,short", b"3,a,b,c", b"4,\xff,x", b'5,"open,x', b"", b"6,fine,y"]
    out = LineParser(("id", "name", "val"), header_line="id,name,val")(lines_batch(raw))
    assert [r["id"] for r in out.rows.to_pylist()] == ["1", "6"]
    rejects = {r["line"]: r["reason"] for r in out.rejects.to_pylist()}
    assert rejects == {
        "2,short": "2 fields where the header has 3",
        "3,a,b,c": "4 fields where the header has 3",
        "4,\\xff,x": "bytes not valid in utf-8",
        '5,"open,x': "unbalanced quotes (a quoted field with a newline needs --multiline)",
    }
    assert out.skipped == 2  # the header and the blank line
    assert out.rows_read == 6


def test_a_quoted_field_left_open_with_an_even_count_of_quotes_is_rejected_wherever_it_is():
    """1,a"b,"c: a quote inside a field, then a quoted field not closed on its line. Arrow's
    reader ran it on into the next lines (the batch then failed: "Arrays were not all the
    same length"); it is quarantined, in the middle of a batch and as its last line alike."""
    reason = "a quoted field not closed on its line (one with a newline needs --multiline)"
    for raw in ([b'1,a"b,"c', b"2,x,y", b'3,"p""q","r"s'], [b"2,x,y", b'3,"p""q","r"s', b'1,a"b,"c']):
        out = LineParser(("id", "name", "val"))(lines_batch(raw, block=7))
        assert [[r[c] for c in ("id", "name", "val")] for r in out.rows.to_pylist()] == [["2", "x", "y"],
                                                                                        ["3", 'p"q', "rs"]]  # fmt: skip
        assert {r["line"]: r["reason"] for r in out.rejects.to_pylist()} == {'1,a"b,"c': reason}
        assert out.rows_read == 3


def test_header_is_dropped_once_per_file_and_bom_removed():
    p = LineParser(("a", "b"), header_line="a,b")
    first = p(lines_batch(["\ufeffa,b".encode(), b"1,2"], file="x.csv"))
    again = p(lines_batch([b"a,b"], file="x.csv", block=0))  # same file, later batch: data
    other = p(lines_batch([b"a,b", b"3,4"], file="y.csv"))
    assert [r["a"] for r in first.rows.to_pylist()] == ["1"]
    assert [r["a"] for r in again.rows.to_pylist()] == ["a"]
    assert [r["a"] for r in other.rows.to_pylist()] == ["3"]


def test_a_later_split_of_a_file_has_no_header():
    out = LineParser(("a", "b"), header_line="a,b")(lines_batch([b"5,6"], block=1024))
    assert out.rows.num_rows == 1 and out.skipped == 0


def test_a_different_header_is_an_error():
    with pytest.raises(HeaderMismatch, match="differs"):
        LineParser(("a", "b"), header_line="a,b")(lines_batch([b"a,c", b"1,2"], file="other.csv"))


def test_without_header_the_first_line_is_data_without_bom():
    out = LineParser(("_c0", "_c1"), header_line=None)(lines_batch(["\ufeff1,2".encode(), b"3,4"]))
    assert [r["_c0"] for r in out.rows.to_pylist()] == ["1", "3"]


def test_fresh_parser_forgets_seen_files():
    p = LineParser(("a",), header_line="a")
    p(lines_batch([b"a", b"1"]))
    assert p.fresh()(lines_batch([b"a", b"2"])).rows.num_rows == 1


@pytest.mark.parametrize(
    ("line", "reason"),
    [("1,2", "2 fields where the header has 3"), ("1,2,3", "a value does not fit --schema"), (None, "malformed")],
)
def test_malformed_detail(line, reason):
    assert malformed_detail(line, 3, ",", '"') == reason


def arrows_fields(line: str) -> list[str] | None:
    """One line's fields as Arrow's CSV reader's state machine reads them (a quote opens a
    quoted part only at a field's start; a doubled quote in it is a quote; after it the
    field runs on to the delimiter); None if a quoted part is still open at the end."""
    fields, i, n = [], 0, len(line)
    while True:
        value = []
        if i < n and line[i] == '"':
            i += 1
            while True:
                if i >= n:
                    return None
                if line[i] == '"':
                    if i + 1 < n and line[i + 1] == '"':
                        value.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                value.append(line[i])
                i += 1
        while i < n and line[i] != ",":
            value.append(line[i])
            i += 1
        fields.append("".join(value))
        if i >= n:
            return fields
        i += 1


def test_random_lines_are_read_as_arrows_state_machine_reads_them():
    """Lines of delimiters, quotes (doubled, inside fields, left open), empty fields and
    non-ASCII text, at random, in batches (an open quote lands last in some): each kept line
    is the row the state machine reads, each other one rejected for its reason."""
    import random

    rng = random.Random(7)
    pieces = ["a", "bc", ",", ",", '"', '""', '"""', "é", " ", ";", "🎉", "x,y", "\\"]
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 14))) for _ in range(4000)]
    for start in range(0, len(lines), 400):
        batch = lines[start : start + 400]
        out = LineParser(("x", "y", "z"))(lines_batch([line.encode() for line in batch], block=9))
        want_rows, want_rejects = [], {}
        for line in batch:
            fields = arrows_fields(line)
            if line.count('"') % 2:
                want_rejects[line] = "unbalanced quotes (a quoted field with a newline needs --multiline)"
            elif fields is None:
                want_rejects[line] = "a quoted field not closed on its line (one with a newline needs --multiline)"
            elif len(fields) != 3:
                want_rejects[line] = f"{len(fields)} fields where the header has 3"
            else:
                want_rows.append([f or None for f in fields])
        assert [[r[c] for c in ("x", "y", "z")] for r in out.rows.to_pylist()] == want_rows
        assert {r["line"]: r["reason"] for r in out.rejects.to_pylist()} == want_rejects
        assert len(want_rows) > 20 and len(want_rejects) > 20


def plain_line(rng, width: int) -> str:
    """A line of the forms c/fields.c splits itself: unquoted fields without quotes, quoted
    ones (doubled quotes, delimiters, non-ASCII inside) closed before their delimiter."""
    inside = ["a", "bc", "é", "🎉", " ", ";", "0123456789abcdefghij"]

    def field() -> str:
        kind = rng.random()
        if kind < 0.15:
            return ""
        text = "".join(rng.choice(inside) for _ in range(rng.randint(0, 6)))
        if kind < 0.35:
            return '"' + "".join(rng.choice([text, '""', ",", ""]) for _ in range(3)) + '"'
        return text

    return ",".join(field() for _ in range(width))


@pytest.mark.parametrize("wanted", [(), ("z", "x")])
def test_lines_split_in_c_are_the_columns_arrows_reader_gives(wanted):
    """c/fields.c against Arrow's reader on the same batches: the same strings and nulls,
    the same rows of another width (lines of 2 to 4 fields), wherever the lines fall against
    its 16-byte blocks and the end of the batch's buffer."""
    import random

    from kappa_ingest import native

    rng = random.Random(11)
    parser = LineParser(("x", "y", "z"), wanted=wanted)
    kept = wanted or parser.columns
    for _ in range(60):
        lines = [plain_line(rng, rng.choice([3, 3, 3, 3, 2, 4])) for _ in range(rng.randint(1, 120))]
        arr = pa.array([line.encode() for line in lines], pa.binary()).view(pa.string())
        slots = [kept.index(c) if c in kept else -1 for c in parser.columns]
        split = native.split_fields(arr, 3, slots, b",", b'"')
        assert split is not None, lines
        table, bad = parser._parse_in_arrow(arr, parser.columns, kept)
        assert pa.Table.from_arrays(split[0], names=list(kept)).equals(table)
        assert split[1] == bad


@pytest.mark.parametrize("line", ['1,a"b,c', '1,"a"b,c', '1,"open,c', '1,"a""",c"', "1,a\rb,c"])
def test_lines_of_other_forms_are_left_to_arrows_reader(line):
    from kappa_ingest import native

    arr = pa.array([b"1,2,3", line.encode()], pa.binary())
    assert native.split_fields(arr, 3, [0, 1, 2], b",", b'"') is None


def test_the_parser_reads_as_the_state_machine_with_and_without_the_c_split(monkeypatch):
    """The parser's rows and rejects against the state machine's reading of each line:
    split in C, left to Arrow for a last line of another form, and without the C loops."""
    import random

    from kappa_ingest import native

    rng = random.Random(5)
    lines = [plain_line(rng, rng.choice([3, 3, 3, 2])) for _ in range(500)]
    want_rows = [[f or None for f in fields] for line in lines if len(fields := arrows_fields(line)) == 3]
    want_rejects = {line: "2 fields where the header has 3" for line in lines if len(arrows_fields(line)) == 2}
    assert len(want_rows) > 300 and len(want_rejects) > 50
    split = native.split_fields
    calls = []
    monkeypatch.setattr(native, "split_fields", lambda *a: calls.append(out := split(*a)) or out)
    for available in (True, False):
        if not available:
            monkeypatch.setattr(native, "split_fields", lambda *a: (_ for _ in ()).throw(native.NativeUnavailable("")))
        for extra in ([], ['1,a"b"c,d']):  # a quote inside a field: the state machine keeps it
            out = LineParser(("x", "y", "z"))(lines_batch([line.encode() for line in lines + extra], block=3))
            want = want_rows + [arrows_fields(line) for line in extra]
            assert [[r[c] for c in ("x", "y", "z")] for r in out.rows.to_pylist()] == want
            assert {r["line"]: r["reason"] for r in out.rejects.to_pylist()} == want_rejects
    assert [c is not None for c in calls] == [True, False]  # the C split ran, then left its batch to Arrow


def test_a_batch_the_c_split_would_read_otherwise_is_left_to_arrows_reader():
    """A BOM first in the batch (Arrow's reader drops it there, and only there), an empty
    line, and a column kept twice (the key that is also the event time) are Arrow's."""
    from kappa_ingest import native

    for raw in ([b"\xef\xbb\xbfa,b,c", b"1,2,3"], [b"1,2,3", b"", b"4,5,6"]):
        assert native.split_fields(pa.array(raw, pa.binary()), 3, [0, 1, 2], b",", b'"') is None
    with pytest.raises(ValueError):
        native.split_fields(pa.array([b"1,2,3"], pa.binary()), 3, [0, -1, 0], b",", b'"')
    parser = LineParser(("x", "y", "z"), wanted=("x", "x"))
    lines = pa.array([b"a,b,c", b"1,2,3"], pa.binary()).view(pa.string())
    table, bad = parser._parse(lines, parser.columns, ("x", "x"))
    assert [table.column(i).to_pylist() for i in range(2)] == [["a", "1"], ["a", "1"]] and bad == []
