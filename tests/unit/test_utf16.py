"""UTF-16 files on the line path: each task finds its split's lines by 16-bit unit (a byte
0x0A inside a character is not a line end) and every line lands in exactly one split; a
batch of lines turns into the UTF-8 Python's decoder gives, damaged lines marked."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from helpers import split_by_rule
from kappa_ingest.source import split_reader, transcode

# Characters whose UTF-16 bytes hold 0x0A or 0x0D, a pair of surrogates, and plain ones.
CHARS = ["a", ",", '"', "é", "\u0a0d", "\u0d0a", "\u010a", "\u0a00", "😀", "\u2028", "€"]
ENDS = ["\n", "\n", "\r\n", "\r", "\r\r\n", "\n\r"]


def _units_hadoop(data: bytes, start: int, length: int, order: str) -> list[bytes]:
    """LineRecordReader's rule by unit: lines begin at even offsets; a split holds those
    that begin in (start, start + length] (the first, from 0); a stray last byte belongs
    to the last line, or is one after a line end."""
    k = len(data) // 2
    u = [int.from_bytes(data[2 * i : 2 * i + 2], "little" if order == "<" else "big") for i in range(k)]

    def read_line(pos: int) -> tuple[bytes, int] | None:
        if pos > k or (pos == k and len(data) == 2 * k):
            return None
        i = pos
        while i < k and u[i] not in (10, 13):
            i += 1
        if i == k:
            return data[2 * pos :], k + 1
        crlf = u[i] == 13 and i + 1 < k and u[i + 1] == 10
        return data[2 * pos : 2 * i], i + (2 if crlf else 1)

    return split_by_rule(read_line, start // 2, (start + length) // 2, skip=start != 0)


def _text(rnd: random.Random, n: int) -> str:
    text = "".join("".join(rnd.choice(CHARS) for _ in range(rnd.choice([0, 1, 3, 12]))) + rnd.choice(ENDS)
                   for _ in range(n))  # fmt: skip
    return text if rnd.random() < 0.5 else text.rstrip("\r\n")


def _splits(path, size: int, split: int, chunk: int, order: str) -> list[list[bytes]]:
    return [
        [b for arr in split_reader.split_lines(str(path), s, min(split, size - s), chunk_bytes=chunk, order=order)
         for b in arr.to_pylist()]
        for s in range(0, max(size, 1), split)
    ]  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("order", ["<", ">"])
def test_each_line_in_the_one_split_that_holds_its_first_unit(tmp_path, seed, order):
    rnd = random.Random(seed)
    text = _text(rnd, rnd.choice([1, 7, 60]))
    data = text.encode("utf-16-le" if order == "<" else "utf-16-be")
    if seed % 3 == 2:
        data += b"\x41"  # a file cut in the middle of a unit
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    for split in {1, 2, 3, 5, 8, 33, max(1, len(data) // 3), len(data) + 1}:
        want = [_units_hadoop(data, s, min(split, len(data) - s), order) for s in range(0, max(len(data), 1), split)]
        for chunk in (1, 3, 64, 1 << 20):
            assert _splits(path, len(data), split, chunk, order) == want, (split, chunk)
    # and the lines are the text's, cut at \n, \r\n and \r only
    lines = [b for s in want for b in s]
    codec = "utf-16-le" if order == "<" else "utf-16-be"
    if len(data) % 2 == 0:
        expected = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if text.endswith(("\n", "\r")):
            expected = expected[:-1]
        assert [b.decode(codec) for b in lines] == (expected if text else [])


@pytest.mark.parametrize("data", [b"", b"a", b"a\x00", b"\n\x00", b"\n\x00b", b"a\x00\n\x00b\x00c", b"\r\x00\n\x00\r"])
def test_edge_files(tmp_path, data):
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    for split in (1, 2, 3, 10_000):
        want = [_units_hadoop(data, s, min(split, len(data) - s), "<") for s in range(0, max(len(data), 1), split)]
        assert _splits(path, len(data), split, 1, "<") == want, split


def test_a_byte_order_mark_names_the_order_of_plain_utf_16(tmp_path):
    le, be, bare = tmp_path / "le", tmp_path / "be", tmp_path / "bare"
    le.write_bytes("a".encode("utf-16"))  # Python writes the machine's order, with a BOM
    be.write_bytes(b"\xfe\xff" + "a".encode("utf-16-be"))
    bare.write_bytes("a".encode("utf-16-be"))
    assert [transcode.byte_order("utf-16", str(p)) for p in (le, be, bare)] == ["<", ">", ">"]
    assert transcode.byte_order("utf-16le", str(be)) == "<" and transcode.byte_order("utf-16be", str(le)) == ">"


def _reference(raw: bytes, big: bool) -> tuple[bytes, bool]:
    codec = "utf-16-be" if big else "utf-16-le"
    try:
        return raw.decode(codec).encode(), False
    except UnicodeDecodeError:
        return raw.decode(codec, errors="replace").encode(), True


@pytest.mark.parametrize("seed", range(5))
def test_batches_decode_as_pythons_decoder_line_by_line(seed):
    rnd = random.Random(seed)
    texts = ["".join(rnd.choice(CHARS) for _ in range(rnd.choice([0, 1, 5, 30]))) for _ in range(300)]
    big = np.array([rnd.random() < 0.3 for _ in texts])
    raws = [t.encode("utf-16-be" if b else "utf-16-le") for t, b in zip(texts, big, strict=True)]
    if seed == 2:  # damage, one kind a seed: a lone surrogate,
        raws[5] = "😀".encode("utf-16-le")[:2] + b"a\x00" if not big[5] else "😀".encode("utf-16-be")[:2] + b"\x00a"
    if seed == 3:  # a cut unit,
        raws[9] += b"\x41"
    if seed == 4:  # the halves of a pair on two lines
        raws[20], raws[21] = "😀".encode("utf-16-le")[:2], "😀".encode("utf-16-le")[2:]
        big[20] = big[21] = False
    array = pa.array(raws, pa.binary())
    for lo, hi in ((0, 300), (3, 250), (299, 300), (0, 0)):
        out, bad = transcode.utf16_to_utf8(array.slice(lo, hi - lo), big[lo:hi])
        want = [_reference(r, b) for r, b in zip(raws[lo:hi], big[lo:hi], strict=True)]
        assert out.to_pylist() == [w[0] for w in want]
        assert list(bad) == [w[1] for w in want]


def test_the_header_is_read_by_unit_and_its_bom_taken_off(tmp_path):
    from kappa_ingest.source.dataframe import first_line

    path = tmp_path / "in.csv"
    path.write_bytes("\ufeffid,Ċname\r\n1,x\n".encode("utf-16-le"))  # "Ċ" is 0A 01 in UTF-16LE
    assert first_line(str(path), "utf-16") == "id,Ċname"
    path.write_bytes("id,Ċname".encode("utf-16-be"))  # no line end, no BOM: big-endian
    assert first_line(str(path), "utf-16") == "id,Ċname"


@pytest.mark.parametrize("where", ["in.csv.gz", "hdfs://nn/in.csv"])
def test_utf_16_that_the_tasks_cannot_read_themselves_is_refused_in_one_line(tmp_path, where):
    import gzip

    from kappa_ingest.errors import InputError
    from kappa_ingest.source.dataframe import first_line

    path = where if "://" in where else str(tmp_path / where)
    if "://" not in where:
        (tmp_path / where).write_bytes(gzip.compress("id\n1\n".encode("utf-16")))
    with pytest.raises(InputError, match="local uncompressed files \\(or objects\\) only") as e:
        first_line(path, "utf-16")
    assert "\n" not in str(e.value)
