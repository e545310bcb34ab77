"""Single-byte encodings to UTF-8 a batch at a time: the same text as Python's decoder
line by line, on slices, with undefined bytes marked."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from kappa_ingest import native
from kappa_ingest.source import transcode


@pytest.fixture(params=["c", "numpy"])
def loops(request, monkeypatch):
    """The C loop (c/transcode.c), or numpy's where the C loops are unavailable."""
    if request.param == "numpy":

        def unavailable(*args):
            raise native.NativeUnavailable("no C compiler (the test's)")

        monkeypatch.setattr(native, "single_byte_to_utf8", unavailable)
    else:
        native.load()  # the C loop, or a failure: without cc both sides would be numpy's
    return request.param


@pytest.mark.parametrize("high", [0.5, 0.02, 1.0])  # a half, a few, all of the bytes above 0x7F
@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "iso-8859-15", "koi8-r", "cp437"])
def test_every_byte_decodes_as_pythons_decoder_has_it(encoding, high, loops):
    rnd = random.Random(3)
    lines = [bytes(rnd.randrange(0x80, 0x100) if rnd.random() < high else rnd.randrange(0x20, 0x7F)
                   for _ in range(rnd.randint(0, 40))) for _ in range(500)]  # fmt: skip
    t = transcode.table(encoding)
    assert t is not None
    array = pa.array(lines, pa.binary())
    for lo, hi in ((0, 500), (17, 300), (499, 500)):
        out, bad = transcode.to_utf8(array.slice(lo, hi - lo), t)
        assert out.to_pylist() == [b.decode(encoding, errors="replace").encode() for b in lines[lo:hi]]
        assert list(bad) == [_undefined(b, encoding) for b in lines[lo:hi]]


def _undefined(line: bytes, encoding: str) -> bool:
    try:
        line.decode(encoding)
        return False
    except UnicodeDecodeError:
        return True


def test_ascii_batches_pass_untouched(loops):
    array = pa.array([b"a,b", b"", b"1,2"], pa.binary())
    out, bad = transcode.to_utf8(array, transcode.table("cp1252"))
    assert out is array and not bad.any()


def test_high_bytes_that_decode_as_ascii_are_not_taken_for_ascii(loops):
    """Mac Arabic writes some ASCII punctuation a second time above 0x7F (0xA0 is a space):
    such a batch keeps its length in UTF-8, and is still not UTF-8 as it is."""
    lines = [b"1\xa02", b"x\xa1", b"plain"]
    out, bad = transcode.to_utf8(pa.array(lines, pa.binary()), transcode.table("mac-arabic"))
    assert out.to_pylist() == [b.decode("mac-arabic").encode() for b in lines] == [b"1 2", b"x!", b"plain"]
    assert not bad.any()


def test_windows_1252_undefined_bytes_are_marked(loops):
    out, bad = transcode.to_utf8(
        pa.array([b"\x80 1", b"x\x81y", b"\x9d"], pa.binary()), transcode.table("windows-1252")
    )
    assert out.to_pylist() == ["€ 1".encode(), "x\ufffdy".encode(), "\ufffd".encode()]
    assert list(bad) == [False, True, True]


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32", "shift_jis", "gb18030", "big5", "no-such-codec"])
def test_only_single_byte_encodings_with_ascii_syntax_have_a_table(encoding):
    assert transcode.table(encoding) is None


def test_a_batch_growing_past_2_gib_offsets_is_not_needed_for_small_ones(loops):
    out, _ = transcode.to_utf8(pa.array([b"\xe9" * 10], pa.binary()), transcode.table("latin-1"))
    assert out.type == pa.binary() and np.array_equal(np.frombuffer(out.buffers()[1], np.int32)[:2], [0, 20])
