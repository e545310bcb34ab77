"""CSV dialects, typed schemas, event time, multiline records, gzip, partitions and the dry
run, each read back from the topic and compared with Python's csv module."""

from __future__ import annotations

import csv
import gzip
import io

import pytest

from helpers import csv_rows, expected_rows, iso_ms_to_epoch, rows, run
from kappa_ingest import datagen

pytestmark = pytest.mark.integration


def test_semicolons_without_header(spark, kafka, tmp_path):
    path = tmp_path / "in.csv"
    path.write_text('a;"b;c";\n1;2;3\n')
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], delimiter=";", header=False)
    assert summary["read_path"] == "lines"
    _, expected, _ = csv_rows(path, delimiter=";", header=False)
    assert sorted((r.value["data"] for r in records), key=str) == sorted(expected, key=str)
    assert {"_c0": "a", "_c1": "b;c", "_c2": None} in [r.value["data"] for r in records]


@pytest.mark.parametrize("encoding", ["latin-1", "windows-1252"])
def test_single_byte_encodings_take_the_line_path_with_sparks_records(spark, kafka, tmp_path, encoding):
    text = 'id,city,price\n1,Zürich,5\n2,Besançon,€ 3\n3,\u00ff\u00e6,\n4,caf\u00e9 "au lait",9\n5,ragged\n'
    raw = text.encode(encoding, errors="replace")
    if encoding == "windows-1252":  # a byte Windows-1252 leaves undefined: quarantined on both paths
        raw += b"6,bad\x81byte,1\n"
    path = tmp_path / "in.csv"
    path.write_bytes(raw)
    runs = {}
    for name, extra in (("lines", {}), ("spark", {"multiline": True})):
        runs[name] = run(
            spark, kafka, tmp_path, inputs=[str(path)], encoding=encoding, topic=f"enc-{encoding}-{name}", **extra
        )
    (_, lines, by_lines), (_, sparks, by_spark) = runs["lines"], runs["spark"]
    assert lines["read_path"] == "lines" and sparks["read_path"] == "spark-csv"
    assert sorted(r.raw_value[r.raw_value.index(b'"data"') :] for r in by_lines) == sorted(
        r.raw_value[r.raw_value.index(b'"data"') :] for r in by_spark
    )
    assert lines["quarantine"]["reasons"] == sparks["quarantine"]["reasons"]
    good = text.encode(encoding, errors="replace").decode(encoding)  # (the undefined byte's row is quarantined)
    header, *body = csv.reader(io.StringIO(good))
    expected = [dict(zip(header, [v or None for v in r], strict=True)) for r in body if len(r) == len(header)]
    assert sorted((r.value["data"] for r in by_lines), key=str) == sorted(expected, key=str)
    assert {"id": "1", "city": "Zürich", "price": "5"} in [r.value["data"] for r in by_lines]


@pytest.mark.parametrize(("encoding", "codec", "bom", "n"), [("utf-16", "utf-16-le", True, 700),
                                                              ("utf-16be", "utf-16-be", False, 40)])  # fmt: skip
def test_utf_16_takes_the_line_path_split_by_unit_with_sparks_records(spark, kafka, tmp_path, encoding, codec, bom, n):
    """700 rows: three splits; 40: one split in three parts (its lines moved by offset)."""
    # U+010A and U+0A0A hold the byte 0x0A: a scan that cut at bytes would break their lines.
    body = [f'{i},{"Ċਊ" * (i % 4)}{"😀" if i % 7 == 0 else ""},{"é" * (i % 3)} "x"' for i in range(n)]
    # (Line ends "\n" only: Spark's multiline reader keeps a CRLF's CR in the last value.)
    text = "id,name,note\n" + "".join(row + "\n" for row in body)
    raw = (b"\xff\xfe" if bom else b"") + text.encode(codec)
    lone = "9999,a".encode(codec) + "😀".encode(codec)[:2] + "bc,x\n".encode(codec)  # a lone surrogate
    ragged = "10000,only two\n".encode(codec)
    path = tmp_path / "in.csv"
    path.write_bytes(raw + lone + ragged)
    (_, lines, by_lines), (_, sparks, by_spark) = (
        run(spark, kafka, tmp_path, inputs=[str(path)], encoding=encoding, topic=f"{encoding}-{name}", **extra)
        for name, extra in (("lines", {"partitions": 3}), ("spark", {"multiline": True}))
    )
    assert lines["read_path"] == "lines" and sparks["read_path"] == "spark-csv"
    if n == 700:
        assert lines["plan"]["split_bytes"] * 2 < path.stat().st_size, lines["plan"]
    else:
        assert lines["plan"]["split_bytes"] > path.stat().st_size and lines["plan"]["parts"] == 3, lines["plan"]
    header, *rows = csv.reader(io.StringIO(text))
    expected = [dict(zip(header, [v or None for v in r], strict=True)) for r in rows]
    assert sorted((r.value["data"] for r in by_lines), key=str) == sorted(expected, key=str)
    assert sorted(r.raw_value[r.raw_value.index(b'"data"') :] for r in by_lines) == sorted(
        r.raw_value[r.raw_value.index(b'"data"') :] for r in by_spark
    )
    assert (
        lines["quarantine"]["reasons"]
        == sparks["quarantine"]["reasons"]
        == {f"bytes not valid in {encoding} (decoded as U+FFFD)": 1, "2 fields where the header has 3": 1}
    )


def test_invalid_utf8_is_quarantined_not_mangled(spark, kafka, tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,name\n1,ok\n2,\xff\xfebad\n3,fine\n")
    cfg, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)])
    assert sorted(r.value["data"]["id"] for r in records) == ["1", "3"]
    assert summary["rows_quarantined"] == 1
    assert summary["quarantine"]["reasons"] == {"bytes not valid in utf-8": 1}
    lines = "".join(p.read_text() for p in (tmp_path / "metrics" / "runs" / cfg.run_id / "quarantine").glob("*.json"))
    assert "2,\\\\xff\\\\xfebad" in lines and "in.csv" in lines


def test_multiline_records(spark, kafka, tmp_path):
    path = tmp_path / "in.csv"
    path.write_text('id,text\n1,"line one\nline two"\n2,"a ""quoted"" word"\n')
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], multiline=True)
    assert summary["read_path"] == "spark-csv"
    _, expected, _ = csv_rows(path)
    assert sorted((r.value["data"] for r in records), key=str) == sorted(expected, key=str)
    assert {"id": "1", "text": "line one\nline two"} in [r.value["data"] for r in records]


def test_quoted_newline_without_multiline_is_quarantined(spark, kafka, tmp_path):
    path = tmp_path / "in.csv"
    path.write_text('id,text\n1,"line one\nline two"\n2,plain\n')
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)])
    assert [r.value["data"] for r in records] == [{"id": "2", "text": "plain"}]
    assert summary["rows_read"] == 3 and summary["rows_quarantined"] == 2


def test_typed_schema_and_event_time(spark, kafka, tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(
        "ts,qty,price,ok,name\n"
        "2026-01-02T03:04:05.678Z,3,9.5,true,a\n"
        "2026-01-02T03:04:06.000Z,,1e3,false,\n"
        "not-a-time,1,1,true,x\n"
        "2026-01-02T03:04:07.000Z,notanint,1,true,y\n"
    )
    _, summary, records = run(
        spark, kafka, tmp_path, inputs=[str(path)], sink="confluent",
        schema="ts STRING, qty INT, price DOUBLE, ok BOOLEAN, name STRING",
        event_time_column="ts", event_time_format="yyyy-MM-dd'T'HH:mm:ss.SSSX",
    )  # fmt: skip
    by_ts = {r.value["data"]["ts"]: r for r in records}
    assert len(records) == 2 and summary["rows_quarantined"] == 2
    first = by_ts["2026-01-02T03:04:05.678Z"]
    assert first.value["data"] == {"ts": "2026-01-02T03:04:05.678Z", "qty": 3, "price": 9.5, "ok": True, "name": "a"}
    assert first.value["event_ts"] == "2026-01-02T03:04:05.678Z"
    assert first.timestamp_ms == iso_ms_to_epoch("2026-01-02T03:04:05.678Z")
    second = by_ts["2026-01-02T03:04:06.000Z"]
    assert second.value["data"] == {"ts": "2026-01-02T03:04:06.000Z", "qty": None, "price": 1000.0, "ok": False,
                                    "name": None}  # fmt: skip
    reasons = summary["quarantine"]["reasons"]
    assert sum(reasons.values()) == 2, reasons
    assert reasons == {"ts: 'not-a-time' is not a timestamp in format \"yyyy-MM-dd'T'HH:mm:ss.SSSX\"": 1,
                       "qty: 'notanint' is not an INT": 1}, reasons  # fmt: skip
    assert summary["read_path"] == "lines"


@pytest.mark.parametrize("sink", ["spark", "kafka-python"])
def test_event_time_is_the_record_timestamp_for_every_sink(spark, kafka, tmp_path, sink):
    path = tmp_path / "in.csv"
    path.write_text("id,ts\n1,2020-05-06 07:08:09\n2,2021-01-01 00:00:00\n")
    _, _, records = run(spark, kafka, tmp_path, inputs=[str(path)], sink=sink,
                        event_time_column="ts", event_time_format="yyyy-MM-dd HH:mm:ss")  # fmt: skip
    got = {r.value["data"]["id"]: (r.timestamp_ms, r.value["event_ts"]) for r in records}
    assert got == {
        "1": (iso_ms_to_epoch("2020-05-06T07:08:09.000Z"), "2020-05-06T07:08:09.000Z"),
        "2": (iso_ms_to_epoch("2021-01-01T00:00:00.000Z"), "2021-01-01T00:00:00.000Z"),
    }


def test_gzip_and_several_files_with_a_glob(spark, kafka, tmp_path):
    d = tmp_path / "in"
    datagen.generate("debs2012", 500, d / "a.csv", seed=1)
    datagen.generate("debs2012", 700, d / "b.csv", gzip_output=True, seed=2)
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(d / "*.csv*")])
    assert summary["rows_sent"] == len(records) == 1200
    by_file = {}
    for r in records:
        by_file.setdefault(r.value["source_file"].rsplit("/", 1)[-1], []).append(r.value["data"])
    assert sorted(by_file) == ["a.csv", "b.csv.gz"]
    for name, got in by_file.items():
        _, expected, _ = csv_rows(d / name)
        assert sorted(got, key=lambda x: x["ts"]) == sorted(expected, key=lambda x: x["ts"])
    with gzip.open(d / "b.csv.gz", "rt") as f:
        assert f.readline().startswith("ts,mf01")


@pytest.mark.parametrize(("partitions", "path_expected"), [(3, "lines"), (1, "lines")])
def test_partitions_set_the_number_of_producers(spark, kafka, tmp_path, partitions, path_expected):
    path = datagen.generate("wide30", 20000, tmp_path / "in.csv")
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], partitions=partitions)
    assert summary["read_path"] == path_expected
    assert len({t["partition"] for t in summary["tasks"]}) == partitions
    assert rows(records) == expected_rows(path)


def test_more_partitions_than_a_gzip_file_splits_into(spark, kafka, tmp_path):
    path = datagen.generate("wide30", 3000, tmp_path / "in.csv", gzip_output=True)
    _, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], partitions=2)
    assert summary["read_path"] == "lines"  # its raw lines shuffled
    assert len({t["partition"] for t in summary["tasks"]}) == 2 and rows(records) == expected_rows(path)


def test_dry_run_sends_nothing(spark, kafka, tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("a,b\n1,2\n3\n")
    cfg, summary, _ = run(spark, kafka, tmp_path, inputs=[str(path)], dry_run=True)
    assert summary["rows_sent"] == 0 and summary["rows_converted"] == 1 and summary["rows_quarantined"] == 1
    from confluent_kafka.admin import AdminClient

    assert cfg.topic not in AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(timeout=10).topics


DRIFT = {  # one landing directory, its files' headers drifting
    "a.csv": "id,name,amount\n1,ann,1.5\n2,bob,\n",
    "b.csv": "id,name,amount,tier\n3,cy,3.25,gold\n",  # a column added
    "c.csv": "id,amount\n4,4.0\n",  # a column removed
    "d.csv": "amount,name,id\n5.5,dee,5\n",  # columns reordered
    "e.csv": "id,full_name,amount\n6,eve,6.75\n7,fay,oops\n",  # a column renamed; a bad amount
}


@pytest.mark.parametrize("options", [{}, {"schema": "id INT, amount DOUBLE"}], ids=["lines", "schema"])
def test_files_whose_headers_drift_are_each_keyed_by_their_own_header(spark, kafka, tmp_path, options):
    import csv

    paths = []
    for name, text in DRIFT.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    typed = bool(options)
    _, summary, records = run(spark, kafka, tmp_path, inputs=paths, **options)
    assert summary["read_path"] == "lines"  # typed values too

    def value(col: str, text: str):
        if text == "":
            return None
        return (int(text) if col == "id" else float(text)) if typed and col in ("id", "amount") else text

    expected, quarantined = [], 0
    for name in DRIFT:
        with open(tmp_path / name, newline="") as f:
            for row in csv.DictReader(f):
                if typed and row["amount"] == "oops":
                    quarantined += 1
                    continue
                expected.append((name, [(c, value(c, v)) for c, v in row.items()]))
    got = [(r.value["source_file"].rsplit("/", 1)[-1], list(r.value["data"].items())) for r in records]
    assert sorted(got, key=str) == sorted(expected, key=str)  # each file's columns, in its header's order
    assert summary["rows_quarantined"] == quarantined
    assert [(h["columns"], [f.rsplit("/", 1)[-1] for f in h["files"]], h["rows"]) for h in summary["headers"]] == [
        (["id", "name", "amount"], ["a.csv"], 2),
        (["id", "name", "amount", "tier"], ["b.csv"], 1),
        (["id", "amount"], ["c.csv"], 1),
        (["amount", "name", "id"], ["d.csv"], 1),
        (["id", "full_name", "amount"], ["e.csv"], 2),
    ]
    assert all(c["ok"] for c in summary["checks"]), summary["checks"]


def test_strict_header_refuses_drifting_headers_before_spark_reads_them(spark, kafka, tmp_path):
    from kappa_ingest.errors import InputError

    (tmp_path / "a.csv").write_text("a,b\n1,2\n")
    (tmp_path / "b.csv").write_text("a,c\n3,4\n")  # Spark's reader alone would call c "b"
    with pytest.raises(InputError, match=r"the header of .*b\.csv \('a,c'\) differs from the first file's"):
        run(spark, kafka, tmp_path, inputs=[str(tmp_path / "a.csv"), str(tmp_path / "b.csv")], strict_header=True)


def test_a_key_column_missing_from_some_files_is_refused(spark, kafka, tmp_path):
    from kappa_ingest.errors import InputError

    (tmp_path / "a.csv").write_text("id,b\n1,2\n")
    (tmp_path / "b.csv").write_text("b\n3\n")
    with pytest.raises(InputError, match=r"--key-column 'id': not in the header of 1 file\(s\): .*b\.csv"):
        run(spark, kafka, tmp_path, inputs=[str(tmp_path / "a.csv"), str(tmp_path / "b.csv")], key_column="id")
