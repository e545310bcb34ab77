"""Typed values, null tokens, event time and keys give the same records byte for byte on
the line path (Arrow's parse) and on Spark's CSV reader, edge values and bad ones
included: both read text, and kappa_ingest.source.typed makes the values of both."""

from __future__ import annotations

import csv
import random
import re
from collections import Counter

import pytest

from helpers import run

pytestmark = pytest.mark.integration

SCHEMA = ("i INT, big BIGINT, small SMALLINT, d DOUBLE, f FLOAT, m DECIMAL(10,2), b BOOLEAN, day DATE,"
          " t TIMESTAMP, txt STRING")  # fmt: skip
CHOICES = {
    "i": ["0", "-0", "+7", "007", "2147483647", "-2147483648", "2147483648", "1e3", " 5", "1.0", "NA", ""],
    "big": ["9223372036854775807", "-9223372036854775808", "9223372036854775808", "12", "\\N"],
    "small": ["32767", "-32768", "32768", "3"],
    "d": ["NaN", "Infinity", "-Infinity", "inf", "-0.0", "1e308", "1e309", "4.9e-324", ".5", "5.", "1E+2", "0x10",
          "1,5", "0.1", "123456789.123", "NA"],
    "f": ["1.1", "3.4e38", "-0.0", "1e39", "x"],
    "m": ["1.005", "-1.005", "99999999.99", "100000000.00", "0.001", "1e2", "2.675", "12", "NA"],
    "b": ["true", "FALSE", "True", "yes", "1", ""],
    "day": ["2024-02-29", "2023-02-29", "0001-01-01", "2024-2-3", "2024-02-29T00:00", "9999-12-31"],
    "t": ["2024-02-29T23:59:59.999999Z", "2024-02-29 12:00:00", "2024-02-29T12:00:00+05:30",
          "2024-02-29T12:00:00.1-0800", "2024-02-29", "1969-12-31T23:59:59.9995Z", "nope", "2024-02-30T00:00:00"],
    "txt": ['quoted, "comma"', "é😀", " ", "", "NA", "\\N", "line\ttab"],
    "ev": ["2020-05-06T07:08:09.123Z", "2020-05-06 07:08:09", "1999-12-31T23:59:59+01:00", "2020-13-01T00:00:00", ""],
    "k": ["a", "b", "é", ""],
}  # fmt: skip


def _table(path, n: int, seed: int) -> None:
    rnd = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", *CHOICES])
        for i in range(n):
            w.writerow([str(i), *(rnd.choice(values) for values in CHOICES.values())])


def _records(records) -> Counter:
    """Key, value and timestamp of each record, the value's ingest time blanked (it is the clock's)."""
    blank = re.compile(rb'^\{"ingest_ts":"[^"]*"')
    return Counter((r.key, blank.sub(b'{"ingest_ts":""', r.raw_value), r.timestamp_ms) for r in records)


@pytest.mark.parametrize("event_format", [None, "yyyy-MM-dd HH:mm:ss"])
def test_the_line_path_and_sparks_reader_make_the_same_records(spark, kafka, tmp_path, event_format):
    path = tmp_path / "typed.csv"
    _table(path, 3000, seed=11)
    options = dict(inputs=[str(path)], schema=SCHEMA, null_values=("NA", "\\N"), key_column="k",
                   event_time_column="ev", event_time_format=event_format, sink="confluent")  # fmt: skip
    runs = {}
    for name, extra in (("lines", {}), ("spark", {"multiline": True})):
        runs[name] = run(spark, kafka, tmp_path, topic=f"typed-{name}-{bool(event_format)}", **options, **extra)
    (_, lines, by_lines), (_, sparks, by_spark) = runs["lines"], runs["spark"]
    assert lines["read_path"] == "lines" and sparks["read_path"] == "spark-csv"
    assert 0 < len(by_lines) < 3000, "the table has good rows and bad ones"
    assert _records(by_lines) == _records(by_spark)
    assert lines["quarantine"]["reasons"] == sparks["quarantine"]["reasons"]
    assert lines["rows_read"] == sparks["rows_read"] == 3000

    # Against Python's csv module: each row once, sent or quarantined; text kept as read.
    with open(path, newline="", encoding="utf-8") as f:
        table = {r["id"]: r for r in csv.DictReader(f)}
    sent = [r.value["data"] for r in by_lines]
    assert len({d["id"] for d in sent}) == len(sent) and {d["id"] for d in sent} <= set(table)
    assert len(sent) + lines["rows_quarantined"] == len(table) == 3000
    for d in sent:
        text = table[d["id"]]["txt"]
        assert d["txt"] == (None if text in ("", "NA", "\\N") else text), (d, table[d["id"]])

    reasons = lines["quarantine"]["reasons"]
    for expected in ("i: '2147483648' is not an INT", "i: ' 5' is not an INT", "d: '0x10' is not a DOUBLE",
                     "m: '100000000.00' is not a DECIMAL(10,2)", "b: 'yes' is not a BOOLEAN",
                     "day: '2023-02-29' is not a DATE", "t: 'nope' is not a TIMESTAMP", "ev: empty, and it is the event time"):  # fmt: skip
        assert expected in reasons, (expected, sorted(reasons))
    values = [r.value for r in by_lines]
    data = [v["data"] for v in values]
    assert all(d["txt"] not in ("NA", "\\N") and d["i"] != "NA" for d in data), "a null token reached a record"
    assert {d["m"] for d in data} >= {1.01, -1.01, 2.68, 100.0}  # half-up to the scale; written as numbers
    assert {d["d"] for d in data} >= {None, 0.1, 1e308, 5e-324}  # NaN and infinities are null: JSON has none
    assert {d["b"] for d in data} == {True, False, None}
    assert "2024-02-29T06:30:00.000Z" in {d["t"] for d in data}  # the offset applied, written in UTC
    assert "2024-02-29T00:00:00.000Z" in {d["t"] for d in data}
    if event_format is None:
        assert {v["event_ts"] for v in values} == {"2020-05-06T07:08:09.123Z", "2020-05-06T07:08:09.000Z",
                                                   "1999-12-31T22:59:59.000Z"}  # fmt: skip
    else:
        assert {v["event_ts"] for v in values} == {"2020-05-06T07:08:09.000Z"}
    assert all(r.timestamp_ms == _epoch_ms(r.value["event_ts"]) for r in by_lines)
    assert {r.key for r in by_lines} == {b"a", b"b", "é".encode(), None}


def _epoch_ms(iso: str) -> int:
    from helpers import iso_ms_to_epoch

    return iso_ms_to_epoch(iso)


@pytest.mark.parametrize("layout", ["wide30", "debs2012"])
def test_the_test_layouts_typed_give_the_same_records_on_both_paths(spark, kafka, tmp_path, layout):
    """The benchmark's own inputs with every column typed (and, on DEBS 2012, its event time
    and a key), as ``make bench`` sends them: the same records on both read paths, every row
    of the csv module's reading sent."""
    from kappa_ingest import datagen

    path = datagen.generate(layout, 2000, tmp_path / f"{layout}.csv", seed=7)
    options = dict(inputs=[str(path)], schema=datagen.schema(layout), sink="confluent")
    if layout == "debs2012":
        options.update(event_time_column="ts", key_column="mf01")
    runs = {name: run(spark, kafka, tmp_path, topic=f"layout-{layout}-{name}", **options, **extra)
            for name, extra in (("lines", {}), ("spark", {"multiline": True}))}  # fmt: skip
    (_, lines, by_lines), (_, sparks, by_spark) = runs["lines"], runs["spark"]
    assert (lines["read_path"], sparks["read_path"]) == ("lines", "spark-csv")
    assert lines["rows_sent"] == sparks["rows_sent"] == 2000
    if layout == "debs2012":  # the records' timestamps are their event times
        assert _records(by_lines) == _records(by_spark)
    else:  # the ingest time: the clock's
        assert Counter(k for k, _, _ in _records(by_lines).elements()) == Counter(
            k for k, _, _ in _records(by_spark).elements()
        )
        assert Counter(v for _, v, _ in _records(by_lines).elements()) == Counter(
            v for _, v, _ in _records(by_spark).elements()
        )
    # Against Python's csv module: the typed columns' values, as numbers, row for row.
    numeric = [name for name, kind in (c.split() for c in datagen.schema(layout).split(", "))
               if kind in ("INT", "BIGINT", "DOUBLE")]  # fmt: skip
    with open(path, newline="", encoding="utf-8") as f:
        expected = Counter(tuple(float(row[c]) for c in numeric) for row in csv.DictReader(f))
    data = [r.value["data"] for r in by_lines]
    assert all(isinstance(d[c], int | float) for d in data for c in numeric), "typed columns are JSON numbers"
    assert Counter(tuple(float(d[c]) for c in numeric) for d in data) == expected
