"""The checks a hostile input meets before and while it is read: what is a regular, non-empty
text file (inputs), a header's strict decoding (csv_source.first_line), and records too
large for Kafka (record_size), each on its own, without Spark or a broker."""

from __future__ import annotations

import gzip
import json
import os
import random

import numpy as np
import pyarrow as pa
import pytest

from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.source import record_size
from kappa_ingest.source.columns import BLOCK_COL, FILE_COL, LINE_COL
from kappa_ingest.source.dataframe import first_line
from kappa_ingest.source.inputs import check_head, not_text, resolve_inputs
from kappa_ingest.source.parsing import LineParser, RowParser
from kappa_ingest.source.record_size import Limit, RecordTooLarge, SizeChecked
from kappa_ingest.source.records import RecordSpec, encode_batch


def random_bytes(n: int, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(n)


# -- binary or text ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes_are_not_text(seed):
    assert not_text(random_bytes(200_000, seed)) is not None


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"PK\x03\x04\x14\x00rest", "zip archive"),
        (b"PAR1\x15\x04", "Parquet"),
        (b"%PDF-1.7\n", "PDF"),
        ("id,name\n1,x\n".encode("utf-16-le"), "NUL byte in its first line"),
        (b"id,na\x00me\n1,x\n", "NUL byte in its first line"),
        (b"id,v\n" + b"1,\x01\x02\x03\x04\x05\x06\x07\x08\n" * 20, "control bytes"),
    ],
)
def test_binary_heads_say_why(head, expected):
    assert expected in (not_text(head) or "")


@pytest.mark.parametrize(
    "head",
    [
        b"id,name\n1,x\n",
        b"id,v\n1,a\x00b\n2,c\n",  # a NUL inside a field: data
        b"id,v\r\n1,\tx\x0c\r\n" + b"2,y\n" * 1000,  # tab, form feed, CR: text
        "id,name\n1,Zürich 🎉\n".encode(),
        b"id,v\n" + b"1,\x01\n" + b"2,plain text row here\n" * 100,  # one control byte in 2 KB
        "\ufeffid,v\n1,x\n".encode(),
    ],
)
def test_text_heads_pass(head):
    assert not_text(head) is None


def test_a_control_character_delimiter_is_text():
    head = b"id\x1fname\x1fv\n" + b"1\x1fa\x1fb\n" * 100
    assert "control bytes" in (not_text(head) or "")
    assert not_text(head, delimiter="\x1f") is None


def test_only_the_first_64_kib_are_looked_at():
    head = b"id,v\n" + b"1,abcdefghij\n" * 6000 + random_bytes(100_000)
    assert len(head) > 65536 + 10_000 and not_text(head) is None


def test_a_gzip_stream_named_csv_is_refused_with_its_new_name():
    with pytest.raises(InputError, match=r"input /d/x\.csv: gzip-compressed.*rename it to x\.csv\.gz"):
        check_head("/d/x.csv", gzip.compress(b"a,b\n1,2\n"), compressed=False)
    check_head("/d/x.csv.gz", b"a,b\n1,2\n", compressed=True)  # decompressed text: fine


# -- what an input must be -----------------------------------------------------------------


def test_fifo_symlink_loop_broken_link_and_empty_file_are_refused(tmp_path):
    (tmp_path / "ok.csv").write_text("a\n1\n")
    os.mkfifo(tmp_path / "pipe.csv")
    os.symlink(tmp_path / "b.csv", tmp_path / "a.csv")
    os.symlink(tmp_path / "a.csv", tmp_path / "b.csv")
    os.symlink(tmp_path / "gone", tmp_path / "dangling.csv")
    (tmp_path / "empty.csv").write_bytes(b"")
    cases = {
        "pipe.csv": "not a regular file (a FIFO",
        "a.csv": "symbolic link loop",
        "dangling.csv": "broken symbolic link",
        "empty.csv": "empty (0 bytes)",
    }
    for name, needle in cases.items():
        with pytest.raises(InputError, match=rf"input {tmp_path}/{name}: .*") as e:
            resolve_inputs((str(tmp_path / name),))
        assert needle in str(e.value) and "\n" not in str(e.value)
    # In a directory or a glob too: named, not skipped.
    with pytest.raises(InputError, match=r"pipe\.csv \(in --input .*\): not a regular file"):
        resolve_inputs((str(tmp_path / "p*.csv"),))
    with pytest.raises(InputError, match=r"(a|b)\.csv \(in --input .*\): a symbolic link loop"):
        resolve_inputs((str(tmp_path),))
    paths, total = resolve_inputs((str(tmp_path / "ok.csv"),))
    assert paths == [str(tmp_path / "ok.csv")] and total == 4


def test_a_directory_found_by_a_glob_is_passed_over(tmp_path):
    (tmp_path / "sub.csv").mkdir()
    (tmp_path / "x.csv").write_text("a\n1\n")
    assert resolve_inputs((str(tmp_path / "*.csv"),))[0] == [str(tmp_path / "x.csv")]


def test_first_line_refuses_binary_and_undecodable_headers(tmp_path):
    (tmp_path / "bin.csv").write_bytes(random_bytes(200_000))
    with pytest.raises(InputError, match=r"bin\.csv: not a text file"):
        first_line(str(tmp_path / "bin.csv"))
    (tmp_path / "h.csv").write_bytes(b"id,na\xffme\n1,x\n")
    with pytest.raises(
        InputError, match=r"h\.csv: its header is not valid utf-8: byte 0xff at byte offset 5;.*--encoding"
    ):
        first_line(str(tmp_path / "h.csv"))
    assert first_line(str(tmp_path / "h.csv"), "iso-8859-1") == "id,na\xffme"
    # Without a header the first line is data: its bad bytes are the parser's to quarantine.
    assert first_line(str(tmp_path / "h.csv"), header=False) == "id,na\ufffdme"
    with gzip.open(tmp_path / "g.csv.gz", "wb") as f:
        f.write(b"\xef\xbb\xbfid,\xc3(x\n")
    with pytest.raises(InputError, match=r"byte 0xc3 at byte offset 6 of its decompressed text"):
        first_line(str(tmp_path / "g.csv.gz"))


# -- records too large for Kafka -----------------------------------------------------------


@pytest.mark.parametrize(
    ("sink", "settings", "topic_max", "expected"),
    [
        ("confluent", {}, 1_048_588, Limit(1_000_000, "the producer's max.request.size")),
        ("spark", {}, 1_048_588, Limit(1_048_576, "the producer's max.request.size")),
        ("kafka-python", {}, 200_000, Limit(200_000, "the topic's max.message.bytes")),
        ("confluent", {"max.request.size": "5000000"}, 2_000_000, Limit(2_000_000, "the topic's max.message.bytes")),
        ("confluent", {"max.request.size": "300000"}, None, Limit(300_000, "the producer's max.request.size")),
    ],
)
def test_the_limit_is_the_smaller_of_topic_and_producer(sink, settings, topic_max, expected):
    assert record_size.limit(sink, settings, topic_max) == expected


def test_the_topic_limit_of_a_topic_not_there_yet():
    class Admin:
        def __init__(self, topic, broker):
            self.topic, self.broker = topic, broker

        def topic_setting(self, topic, name):
            return self.topic

        def broker_setting(self, name):
            return self.broker

    assert record_size.topic_max(Admin("200000", "9"), "t") == 200_000
    assert record_size.topic_max(Admin(None, "3000000"), "t") == 3_000_000
    assert record_size.topic_max(Admin(None, "3000000"), "t", {"max.message.bytes": "123456"}) == 123_456
    assert record_size.topic_max(Admin(None, None), "t") == record_size.BROKER_MAX_DEFAULT


@pytest.mark.parametrize(
    ("sink", "settings", "topic_max", "batch"),
    [
        ("confluent", {}, 16 * 1024 * 1024, 16 * 1024 * 1024 - 128),  # a topic the run created
        ("confluent", {}, 8 * 1024 * 1024, 8 * 1024 * 1024 - 128),  # one it created on a managed cluster
        ("confluent", {}, 1_048_588, 1_048_588 - 128),  # Kafka's default limit: as large as it takes
        ("confluent", {}, 64 * 1024 * 1024, 16 * 1024 * 1024),  # never beyond the default
        ("confluent", {"batch.size": "65536"}, 1_048_588, 65536),  # a given size stands ...
        ("confluent", {"batch.size": "4194304"}, 1_048_588, 1_048_588 - 128),  # ... within the topic's limit
        ("kafka-python", {}, 8 * 1024 * 1024, 1024 * 1024),
        ("spark", {}, 200_000, 200_000 - 128),
    ],
)
def test_batches_are_as_large_as_the_topic_takes(sink, settings, topic_max, batch):
    assert int(record_size.batches_within(settings, sink, topic_max)["batch.size"]) == batch


def test_a_topic_the_run_creates_has_room_for_the_batches():
    room = str(record_size.BATCH_BYTES)
    assert record_size.created_topic_config({}, 1_048_588) == {"max.message.bytes": room}
    assert record_size.created_topic_config({"cleanup.policy": "delete"}, 1_048_588) == {
        "cleanup.policy": "delete", "max.message.bytes": room,
    }  # fmt: skip
    assert record_size.created_topic_config({"max.message.bytes": "200000"}, 1_048_588) == {
        "max.message.bytes": "200000"
    }
    assert record_size.created_topic_config({}, 64 * 1024 * 1024) == {}  # brokers that allow more keep it
    managed = record_size.MANAGED_ROOM  # where a cluster's policy refuses BATCH_BYTES
    assert record_size.created_topic_config({}, 1_048_588, managed) == {"max.message.bytes": str(managed)}
    assert record_size.created_topic_config({}, managed, managed) == {}


def lines_batch(raw: list[bytes], file: str = "file:///d/in.csv") -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(raw, pa.binary()).view(pa.string()), pa.array([file] * len(raw)), pa.array([0] * len(raw))],
        names=[LINE_COL, FILE_COL, BLOCK_COL],
    )


def record_bytes(spec: RecordSpec, row: dict[str, str], file: str, fixed: int) -> int:
    """The size the check must find: the encoder's value, the key, the headers, the framing."""
    batch = pa.RecordBatch.from_pylist([{**row, FILE_COL: file}])
    enc = encode_batch(batch, spec, 1_700_000_000_123)
    key = len(row[spec.key_column].encode()) if spec.key_column else 0
    return len(enc.values[0].as_py()) + key + len(file.encode()) + fixed + record_size.FRAMING_BYTES


@pytest.mark.parametrize("key", [None, "id"])
def test_a_row_over_the_limit_is_moved_to_the_rejects_with_its_exact_size(key):
    spec = RecordSpec(("id", "v"), "run-1", key)
    fixed = record_size.header_bytes("run-1", "confluent")
    file = "file:///d/in.csv"
    big = "x" * 300_000
    limit = Limit(200_000, "the topic's max.message.bytes")
    checked = SizeChecked(LineParser(("id", "v"), header_line="id,v"), spec, limit, fixed)
    raw = [b"id,v", b"1,a", b"2," + big.encode(), b"3,\x01\xe2\x82\xac", b"4,c"]
    parsed = checked(lines_batch(raw, file))
    assert parsed.rows.column("id").to_pylist() == ["1", "3", "4"]
    assert parsed.rows_read == 4 and parsed.rejects.num_rows == 1
    size = record_bytes(spec, {"id": "2", "v": big}, file, fixed)
    [reject] = parsed.rejects.to_pylist()
    assert reject["reason"] == f"record of {size:,} bytes exceeds the topic's max.message.bytes (200,000)"
    assert reject["line"] == "2," + big and reject["source_file"] == file
    assert list(parsed.reject_at) == [2] and list(parsed.row_at) == [1, 3, 4]


def test_the_bound_settles_small_rows_without_encoding(monkeypatch):
    spec = RecordSpec(("id", "v"), "r")
    checked = SizeChecked(LineParser(("id", "v"), header_line="id,v"), spec, Limit(1_000_000, "x"), 30)
    monkeypatch.setattr(SizeChecked, "sizes", lambda *a: pytest.fail("encoded a row the bound settles"))
    parsed = checked(lines_batch([b"id,v", *[f"{i},{'y' * 100}".encode() for i in range(1000)]]))
    assert parsed.rows.num_rows == 1000 and parsed.rejects.num_rows == 0


def test_the_bound_is_never_below_the_exact_size():
    spec = RecordSpec(("id", "v"), "r", "id")
    rows = [("1", "\x01" * 5000), ("2", '"' * 5000), ("3", "é" * 5000), ("4", "plain")]
    checked = SizeChecked(LineParser(("id", "v"), header_line="id,v"), spec, Limit(10, "x"), 30)
    raw = [b"id,v", *[f'{i},"{v.replace(chr(34), chr(34) * 2)}"'.encode() for i, v in rows]]
    batch = lines_batch(raw)
    parsed = checked.inner(batch)
    bounds = checked.upper_bounds(batch, parsed)
    exact = checked.sizes(parsed.rows, parsed.columns)
    assert (bounds >= exact).all() and len(exact) == 4


def test_spark_parsed_rows_are_rejected_with_their_fields_as_json():
    from kappa_ingest.source.columns import REJECT_COL

    spec = RecordSpec(("id", "n"), "r")
    columns = {"id": ["a", "b" * 3000], "n": pa.array([1, 2], pa.int32()), FILE_COL: ["file:///d/x.csv"] * 2}
    batch = pa.RecordBatch.from_pydict({**columns, REJECT_COL: pa.nulls(2, pa.string())})
    checked = SizeChecked(RowParser(("id", "n")), spec, Limit(1000, "the topic's max.message.bytes"), 30)
    parsed = checked(batch)
    assert parsed.rows.column("id").to_pylist() == ["a"]
    [reject] = parsed.rejects.to_pylist()
    assert json.loads(reject["line"]) == {"id": "b" * 3000, "n": 2}
    assert reject["reason"].startswith("record of ") and reject["reason"].endswith("max.message.bytes (1,000)")


def test_strict_raises_naming_the_file_and_line():
    spec = RecordSpec(("id", "v"), "r")
    checked = SizeChecked(LineParser(("id", "v"), header_line="id,v"), spec, Limit(400, "the topic's max.message.bytes"),
                          30, strict=True)  # fmt: skip
    with pytest.raises(RecordTooLarge) as e:
        checked(lines_batch([b"id,v", b"1,a", b"2," + b"z" * 500]))
    located = e.value.located(split_start=0, before=10, counts_lines=True)
    assert str(located).startswith("input /d/in.csv, line 13: record of ")
    assert "--strict-size" in str(located) and "max.message.bytes (400)" in str(located)
    assert "of the split at byte 4,096" in str(e.value.located(4096, 0, True))
    assert np.isscalar(e.value.size) or isinstance(e.value.size, int)


# -- a file that changes while the run reads it ---------------------------------------------


def test_a_file_changed_or_gone_since_the_plan_is_named(tmp_path):
    from types import SimpleNamespace

    from kappa_ingest.source.splits import Plan, changed_input, local_file

    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("x\n1\n")
    b.write_text("x\n2\n")
    plan = Plan((local_file(str(a), False), local_file(str(b), False)), 1 << 20)
    source = SimpleNamespace(files=(str(a), str(b)), plan=plan)
    assert changed_input(source.plan, "r1") is None
    b.write_text("x\n2\n3\n")
    err = changed_input(source.plan, "r1")
    assert err is not None and err.exit_code == 3
    assert str(err).startswith(f"input {b} changed while the run read it (size 4 -> 6 bytes)")
    b.write_bytes(b"x\n2\n")
    os.utime(b, ns=(plan.files[1].mtime_ms * 1_000_000 + 5_000_000,) * 2)
    assert "modified 5 ms after it was planned, same size" in str(changed_input(source.plan, "r1"))
    a.unlink()
    assert str(changed_input(source.plan, "r1")).startswith(
        f"input {a} changed while the run read it (deleted or moved)"
    )


def test_strict_size_from_the_command_line_and_yaml(tmp_path):
    import argparse

    from kappa_ingest import config

    p = argparse.ArgumentParser()
    config.add_ingest_arguments(p)
    conf = tmp_path / "ingest.yaml"
    conf.write_text("strict-size: true\n")
    args = p.parse_args(["--input", "x.csv", "--topic", "t", "--config", str(conf)])
    assert config.load(args).strict_size is True
    args = p.parse_args(["--input", "x.csv", "--topic", "t", "--strict-size"])
    assert config.load(args).strict_size is True
    assert config.validate({"inputs": ["x.csv"], "topic": "t"}).strict_size is False
    with pytest.raises(UsageError, match="'strict-size': expected true or false"):
        config.validate({"inputs": ["x.csv"], "topic": "t", "strict_size": "yes"})
