"""A typed column whose text is already its JSON literal is written from the text
(kappa_ingest.source.typed.LITERAL): for every field the C check lets through, the text must be
byte for byte what parsing and formatting would have written, and every other field
must take that path. Random fields in the shapes CSV writers produce, edge values added."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kappa_ingest import native
from kappa_ingest.source.records import RecordSpec, _encode_polars, encode_batch, json_literals
from kappa_ingest.source.typed import Typing, convert, literal_type, materialized

EDGES = {
    "double": ["0.0", "-0.0", "50.0", "1.5", "-1.5", "0.1", "0.0001", "0.00001", "0.00012", "999999999999999.0",
               "999999999999999.9", "1000000000000000.0", "123456789012345.6", "1.23456789012345", "0.123456789012345",
               "1.234567890123456", "1e5", "1E-3", "+1.5", "1.", ".5", "01.5", "1.50", "50", "-0", "NaN", "inf",
               "Infinity", "-inf", " 1.5", "1.5 ", "1,5", "", "0.30000000000000004", "9007199254740993.0", "1-2.5",
               "1.5-", "1.2.5", "--1.5", "-", "."],
    "int": ["0", "-0", "7", "-7", "123456789", "-123456789", "1234567890", "2147483647", "2147483648", "+5", "05",
            "1.0", "1e3", " 1", "", "-", "９", "1-2", "12-", "--5"],
    "bigint": ["0", "123456789012345678", "-123456789012345678", "1234567890123456789", "9223372036854775807",
               "9223372036854775808", "00"],
    "tinyint": ["0", "99", "-99", "127", "128", "-128"],
    "smallint": ["0", "9999", "-9999", "32767", "32768"],
    "boolean": ["true", "false", "True", "FALSE", "tRuE", "yes", "1", "0", "", "true "],
    "date": ["2012-02-29", "2013-02-29", "2000-02-29", "1900-02-29", "0001-01-01", "0000-01-01", "9999-12-31",
             "2020-13-01", "2020-00-10", "2020-04-31", "2020-4-3", "2020-04-03T00:00", "20200403"],
    "timestamp": ["2012-02-22T00:00:00.000Z", "2012-02-29T23:59:59.999Z", "2013-02-29T00:00:00.000Z",
                  "2012-02-22T24:00:00.000Z", "2012-02-22T00:60:00.000Z", "2012-02-22T00:00:60.000Z",
                  "2012-02-22T00:00:00Z", "2012-02-22T00:00:00.000", "2012-02-22 00:00:00.000Z",
                  "2012-02-22T00:00:00.000+01:00", "2012-02-22T00:00:00.0000Z", "2012-02-22"],
}  # fmt: skip


def _random_fields(kind: str, rng: np.random.Generator, n: int) -> list[str]:
    if kind == "double":
        scale = 10.0 ** rng.integers(-8, 20, n)
        x = rng.normal(0, 1, n) * scale
        places = rng.integers(0, 18, n)
        shapes = rng.integers(0, 4, n)
        return [repr(float(v)) if s == 0 else f"{v:.{p}f}" if s == 1 else f"{v:g}" if s == 2 else str(round(v))
                for v, p, s in zip(x, places, shapes, strict=True)]  # fmt: skip
    if kind in ("int", "bigint", "tinyint", "smallint"):
        bits = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}[kind]
        width = rng.integers(1, bits, n)
        return [str(int(rng.integers(-(2 ** int(w)), 2 ** int(w)))) for w in width]
    if kind == "boolean":
        return list(rng.choice(["true", "false", "True", "false", "x"], n))
    micros = rng.integers(-(2**62) // 1000, 2**62 // 1000, n) // 1000 * 1000
    stamps = pa.array(micros, pa.timestamp("us", tz="UTC"))
    if kind == "date":
        return [v.strftime("%Y-%m-%d") for v in stamps.cast(pa.date32()).to_pylist()]
    return [f"{v:%Y-%m-%dT%H:%M:%S}.{v.microsecond // 1000:03d}Z" for v in stamps.to_pylist()]


@pytest.mark.parametrize("kind", sorted(EDGES))
def test_a_field_kept_as_its_text_is_what_formatting_its_value_writes(kind):
    rng = np.random.default_rng(7)
    fields = EDGES[kind] + _random_fields(kind, rng, 1500)
    kept = 0
    for text in fields:
        column = pa.array([text])
        if not native.already_literal(column, kind):
            continue
        value, failed = convert(column, kind)
        assert not failed.any(), text
        literal, _ = json_literals(value)
        assert literal.to_pylist() == [text], f"{kind} {text!r} is kept as its text, but is written {literal}"
        kept += 1
    assert kept > len(fields) // 10  # the check lets the common shapes through


@pytest.mark.parametrize("kind", ["double", "int", "bigint", "tinyint"])
def test_a_whole_columns_check_says_what_its_fields_checks_say(kind):
    """c/json.c proves a column without nulls literal from its bytes' classes at once, and
    checks field by field otherwise (a null in a column takes that path): both must agree,
    for columns of many fields, sliced ones too, with one odd field anywhere."""
    rng = np.random.default_rng(11)
    fields = EDGES[kind] + _random_fields(kind, rng, 600)
    one_by_one = {f: native.already_literal(pa.array([f, None]), kind) for f in fields}
    literal = [f for f in fields if one_by_one[f]]
    for f in fields:  # each field alone, and among literals at the start, the middle, the end
        assert native.already_literal(pa.array([f]), kind) == one_by_one[f], f
        for at in (0, 5, 9):
            column = [*literal[:at], f, *literal[at:9]]
            assert native.already_literal(pa.array(column), kind) == one_by_one[f], column
    for _ in range(200):
        column = list(rng.choice(fields, int(rng.integers(1, 40))))
        sliced = pa.array(["x", *column])[1:]
        assert native.already_literal(sliced, kind) == all(one_by_one[f] for f in column), column


def test_a_batch_with_one_field_not_a_literal_is_converted_whole_and_both_encode_alike():
    rows = pa.RecordBatch.from_pydict(
        {"x": ["1.5", "2.25", None], "y": ["1.5", "2.50", None], "b": ["true", "false", None]}
    )
    out, failures = Typing((("x", "double"), ("y", "double"), ("b", "boolean"))).apply(rows)
    assert not failures
    assert literal_type(out.schema.field("x")) == "double" and out.column("x").type == pa.string()
    assert literal_type(out.schema.field("y")) is None and out.column("y").type == pa.float64()
    assert materialized(out).column("x").to_pylist() == [1.5, 2.25, None]
    assert materialized(out).column("b").to_pylist() == [True, False, None]
    files = pa.array(["f"] * 3)
    spec = RecordSpec(("x", "y", "b"), "r")
    kept = encode_batch(out.append_column("__kappa_file", files), spec, 0).values.to_pylist()
    converted = encode_batch(materialized(out).append_column("__kappa_file", files), spec, 0).values.to_pylist()
    assert kept == converted and b'"x":2.25,"y":2.5,"b":false' in kept[1]


@pytest.mark.parametrize("stamps", [["2012-02-22T00:00:00.010Z", "2012-02-29T23:59:59.999Z"], ["2012-02-22T01:00:00.01+01:00", "2012-02-29 23:59:59.999"]])  # fmt: skip
def test_an_event_time_written_as_the_records_write_it_is_copied_and_stamps_the_record(stamps):
    rows = pa.RecordBatch.from_pydict({"ts": stamps, "k": ["a", "b"], "__kappa_file": ["f", "f"]})
    out, failures = Typing((("k", "string"),), event_column="ts").apply(rows)
    assert not failures
    spec = RecordSpec(("ts", "k"), "r", key_column="k", event_time=True)
    got = encode_batch(out, spec, 0)
    reference = _encode_polars(out, spec, 0)  # event_ts formatted from the parsed times
    assert got.values.to_pylist() == reference.values.to_pylist()
    assert got.timestamps_ms.to_pylist() == [1329868800010, 1330559999999]


@pytest.mark.parametrize("kind", ["timestamp", "date", "int", "double"])
def test_a_typed_keys_bytes_do_not_depend_on_the_rows_beside_it(kind):
    """A batch whose fields are all their JSON literals keeps them as text; one with a field
    written otherwise is converted: the same field's key is the same bytes either way, on
    the C path and on polars'."""
    field = {"timestamp": "2012-02-22T00:00:00.010Z", "date": "2012-02-22", "int": "42", "double": "50.125"}[kind]
    other = {"timestamp": "2012-02-22 00:00:00.02", "date": "2012-2-3", "int": "042", "double": "50.1250"}[kind]
    spec = RecordSpec(("k",), "r", key_column="k")
    keys = []
    for fields in ([field, field], [field, other]):
        out, failures = Typing((("k", kind),)).apply(pa.RecordBatch.from_pydict({"k": fields}))
        assert not failures
        batch = out.append_column("__kappa_file", pa.array(["f", "f"]))
        fast, reference = encode_batch(batch, spec, 0), _encode_polars(batch, spec, 0)
        assert fast.keys.to_pylist() == reference.keys.to_pylist()
        keys.append(fast.keys[0].as_py())
    assert keys[0] == keys[1] == field.encode()
