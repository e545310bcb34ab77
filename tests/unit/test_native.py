"""The C record loops agree byte for byte with the Python code they replace, and their
absence falls back to it."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kappa_ingest import native
from kappa_ingest.source.columns import EVENT_TS_COL, FILE_COL
from kappa_ingest.source.parsing import _count_byte
from kappa_ingest.source.records import RecordSpec, _encode_polars, encode_batch

TRICKY = [chr(i) for i in range(0x80)] + ["é", "€", "😀", "\u2028", '"', "\\"]


def _batch(n: int, seed: int = 1) -> pa.RecordBatch:
    rnd = random.Random(seed)

    def text() -> str | None:
        r = rnd.random()
        if r < 0.1:
            return None
        return "" if r < 0.15 else "".join(rnd.choice(TRICKY) for _ in range(rnd.randint(1, 20)))

    columns = ["id", 'na"me', "ü\\x", "c\n4", "a name longer than the sixteen bytes moved at once"]
    data = [pa.array([text() for _ in range(n)], pa.string()) for _ in columns]
    data[1] = pa.array(["plain"] * n)  # nothing to escape, no nulls: copied without looking
    files = pa.array([rnd.choice(["file:/a b.csv", 'file:/é"x.csv', "hdfs://n/x\t.csv"]) for _ in range(n)])
    return pa.RecordBatch.from_arrays([*data, files], names=[*columns, FILE_COL])


@pytest.mark.parametrize("window", [(0, 3000), (17, 2000), (2999, 1), (0, 0)])
def test_c_values_are_polars_bytes(window):
    native.load()  # the C loops, or a failure: without cc both sides would be polars
    batch = _batch(3000).slice(*window)
    spec = RecordSpec(tuple(batch.schema.names[:-1]), "run", key_column="id")
    fast, reference = encode_batch(batch, spec, 1795334121513), _encode_polars(batch, spec, 1795334121513)
    assert fast.values.to_pylist() == reference.values.to_pylist()
    assert fast.keys.to_pylist() == reference.keys.to_pylist()
    assert fast.timestamps_ms.to_pylist() == reference.timestamps_ms.to_pylist()
    assert fast.source_files.to_pylist() == reference.source_files.to_pylist()
    assert fast.nbytes == reference.nbytes


def test_without_a_compiler_the_loops_are_unavailable_and_polars_encodes(tmp_path, monkeypatch):
    monkeypatch.setenv("KAPPA_INGEST_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(native.NativeUnavailable, match="C compiler"):
        native.build()
    monkeypatch.setattr(native, "load", native.build)
    batch = _batch(50)
    columns = batch.schema.names[:-1]
    values = encode_batch(batch, RecordSpec(tuple(columns), "run"), 0).values.to_pylist()
    # Read independently: each value is the row's fields by name, in header order.
    rows = batch.to_pylist()
    assert [json.loads(v) for v in values] == [
        {"ingest_ts": "1970-01-01T00:00:00.000Z", "source_file": r[FILE_COL], "data": {c: r[c] for c in columns}}
        for r in rows
    ]
    assert all(list(json.loads(v)["data"]) == columns for v in values)


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
def test_quote_counts_match_arrow(kind):
    lines = pa.array([b'a,"b""c",d', b"", b'"', b"x" * 40, b'""""', b"no quote"] * 7, kind)
    for part in (lines, lines.slice(3, 20), lines.slice(41, 1), lines.slice(5, 0)):
        expected = np.asarray(pc.count_substring(part, '"'))
        assert list(_count_byte(part, b'"')) == list(expected)


def _typed_batch(n: int, seed: int = 2) -> pa.RecordBatch:
    """Every type --schema offers, edge values and nulls among them, and an event time."""
    import datetime as dt
    from decimal import Decimal

    rnd = random.Random(seed)
    floats = [0.0, -0.0, 1.0, 1e20, 1e-7, 0.1, 123456789.123, float("nan"), float("inf"), float("-inf"), 5e-324,
              1.7976931348623157e308, None]  # fmt: skip
    ints = [0, -1, 2**63 - 1, -(2**63), None]
    moments = [dt.datetime(2024, 2, 29, 23, 59, 59, 999_999, tzinfo=dt.UTC), dt.datetime(1969, 12, 31, 23, 59, 59,
               500, tzinfo=dt.UTC), dt.datetime(1, 1, 1, tzinfo=dt.UTC), None]  # fmt: skip
    pick = lambda values: [rnd.choice(values) for _ in range(n)]  # noqa: E731
    columns = {
        "i": pa.array(pick(ints), pa.int64()),
        "s": pa.array(pick([0, 32767, -32768, None]), pa.int16()),
        "d": pa.array(pick(floats), pa.float64()),
        "f": pa.array(pick([1.1, -0.0, 3.4e38, None]), pa.float32()),
        "m": pa.array(pick([Decimal("1.50"), Decimal("-0.01"), Decimal("99999999.99"), None]), pa.decimal128(10, 2)),
        "b": pa.array(pick([True, False, None]), pa.bool_()),
        "day": pa.array(pick([dt.date(2024, 2, 29), dt.date(1, 1, 1), None]), pa.date32()),
        "t": pa.array(pick(moments), pa.timestamp("us", tz="UTC")),
        "text": pa.array(pick(['a"b', "é", None, ""]), pa.string()),
    }
    stamps = pa.array(pick([m for m in moments if m is not None]), pa.timestamp("us", tz="UTC"))
    files = pa.array(pick(["file:/a.csv", "file:/b\tc.csv"]))
    return pa.RecordBatch.from_arrays([*columns.values(), stamps, files], names=[*columns, EVENT_TS_COL, FILE_COL])


@pytest.mark.parametrize("key", ["i", "d", "t", "day", "text"])
def test_c_typed_values_and_event_time_are_polars_bytes(key):
    native.load()
    batch = _typed_batch(2000)
    spec = RecordSpec(tuple(batch.schema.names[:-2]), "run", key_column=key, event_time=True)
    fast, reference = encode_batch(batch, spec, 1795334121513), _encode_polars(batch, spec, 1795334121513)
    assert fast.values.to_pylist() == reference.values.to_pylist()
    assert fast.keys.to_pylist() == reference.keys.to_pylist()
    assert fast.timestamps_ms.to_pylist() == reference.timestamps_ms.to_pylist()
    some = json.loads(fast.values[0].as_py())
    assert list(some) == ["ingest_ts", "event_ts", "source_file", "data"]


@pytest.mark.parametrize("parts", [1, 2, 3, 12])
@pytest.mark.parametrize("where", ["C", "Python"])
def test_a_keys_partition_is_the_one_kafkas_own_partitioner_gives_it(parts, where, tmp_path, monkeypatch):
    """Against kafka-python's murmur2 (the Java client's): keys of every length and byte,
    a slice of an array, and null keys (-1: the partitioner's random partition)."""
    from kafka.partitioner.default import murmur2

    if where == "Python":
        monkeypatch.setenv("KAPPA_INGEST_CACHE", str(tmp_path))
        monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
        monkeypatch.setattr(native, "load", native.build)
    rnd = random.Random(parts)
    keys = [None if rnd.random() < 0.05 else "".join(rnd.choice(TRICKY) for _ in range(rnd.randint(0, 11)))
            for _ in range(2000)]  # fmt: skip
    arr = pa.array(keys, pa.string()).slice(7)
    expected = [-1 if k is None else (murmur2(k.encode()) & 0x7FFFFFFF) % parts for k in keys[7:]]
    assert native.key_partitions(arr, parts).tolist() == expected
    binary = pa.array([k.encode() if k is not None else None for k in keys], pa.large_binary())
    assert native.key_partitions(binary.slice(7), parts).tolist() == expected
    # Kafka's own test vectors (UtilsTest.testMurmur2: the Java client's signed hashes).
    java = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
            b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}  # fmt: skip
    got = native.key_partitions(pa.array(list(java), pa.binary()), parts).tolist()
    assert got == [(h & 0x7FFFFFFF) % parts for h in java.values()]
