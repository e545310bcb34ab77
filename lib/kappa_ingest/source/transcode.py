"""Lines in another encoding than UTF-8 turned into UTF-8 a batch at a time, so such files
take the line path: the single-byte encodings (Latin-1, Windows-1252, the other ISO-8859
and Windows code pages) and UTF-16.

In these encodings every byte is one character and the line ends and the CSV delimiters
are their ASCII bytes, so Spark's text scan cuts the lines right and each line decodes on
its own. A batch's lines go through the encoding's table of 256 UTF-8 sequences in one
pass of C (c/transcode.c), with no Python object per line; without the C loops, Python's
decoder takes the batch's bytes in one call and numpy finds the new line boundaries. A
byte the encoding leaves undefined (Windows-1252's 0x81, 0x8D, 0x8F, 0x90, 0x9D) decodes
as U+FFFD, as Java's decoder does for Spark's CSV reader, and its line is marked to be
quarantined.

UTF-16 writes each character as one or two 16-bit units, its line ends as the units of
``\\n`` and ``\\r``: the tasks find lines by unit, not byte (:mod:`kappa_ingest.source.split_reader`),
in the byte order of the encoding's name, or, for plain ``utf-16``, of the file's byte
order mark (big-endian without one, as Java reads it). A batch's units decode in one
call where every surrogate is paired within its line; each unit's UTF-8 length (1, 2 or
3 bytes; 2 for each half of a pair) gives the new line boundaries. A line with a lone
surrogate or an odd byte count is decoded with U+FFFD in their place and marked.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kappa_ingest import native

_ASCII_SYNTAX = b"\n\r,;|\t\"' "


@dataclass(frozen=True)
class ByteTable:
    """Per byte value: its UTF-8 length, and whether the encoding leaves it undefined."""

    encoding: str
    utf8_length: np.ndarray  # uint8[256]
    undefined: np.ndarray  # bool[256]
    utf8: np.ndarray  # uint8[256 * 4]: each byte value's UTF-8 bytes (utf8_length of them)
    high_grows: bool  # every byte above 0x7F takes two UTF-8 bytes or more (Mac Arabic's do not)


@lru_cache(maxsize=16)
def table(encoding: str) -> ByteTable | None:
    """The byte table of ``encoding``, or None where it is UTF-8 or not a single-byte
    encoding whose ASCII bytes are ASCII (UTF-16, Shift-JIS: Spark's reader reads those)."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        return None
    if name == "utf-8":
        return None
    lengths = np.zeros(256, dtype=np.uint8)
    undefined = np.zeros(256, dtype=bool)
    utf8 = np.zeros(256 * 4, dtype=np.uint8)
    for b in range(256):
        try:
            char = bytes([b]).decode(name)
        except UnicodeDecodeError:
            undefined[b], char = True, "\ufffd"
        if len(char) != 1:
            return None
        encoded = char.encode("utf-8")
        lengths[b] = len(encoded)
        utf8[4 * b : 4 * b + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    chars = "".join(bytes([b]).decode(name, errors="replace") for b in range(256))
    if bytes(range(256)).decode(name, errors="replace") != chars:  # bytes read together: a multi-byte encoding
        return None
    if _ASCII_SYNTAX.decode(name, errors="replace") != _ASCII_SYNTAX.decode("ascii"):
        return None
    if (lengths[:0x80] != 1).any() or undefined[:0x80].any():  # (to_utf8 takes bytes below 0x80 as they are)
        return None
    return ByteTable(name, lengths, undefined, utf8, bool((lengths[0x80:] >= 2).all()))


def to_utf8(lines: pa.Array, t: ByteTable) -> tuple[pa.Array, np.ndarray]:
    """``lines`` (binary) in UTF-8, and which of them hold a byte ``t`` leaves undefined."""
    if lines.null_count:  # (the text scan gives none)
        lines = pc.fill_null(lines, b"")
    n = len(lines)
    offsets, data = _offsets_and_data(lines)
    try:
        text, utf8_offsets, bad = native.single_byte_to_utf8(data, offsets - offsets[0], t.utf8, t.utf8_length,
                                                             t.undefined)  # fmt: skip
    except native.NativeUnavailable:
        return _to_utf8_numpy(lines, n, offsets, data, t)
    if len(text) == len(data) and t.high_grows:  # ASCII: already UTF-8
        return lines, bad
    return _binary(n, utf8_offsets, text), bad


def _to_utf8_numpy(
    lines: pa.Array, n: int, offsets: np.ndarray, data: np.ndarray, t: ByteTable
) -> tuple[pa.Array, np.ndarray]:
    """:func:`to_utf8` without the C loops: Python's decoder, the offsets by numpy."""
    bad = np.zeros(n, dtype=bool)
    if not (data >= 0x80).any():  # ASCII: already UTF-8
        return lines, bad
    text = data.tobytes().decode(t.encoding, errors="replace").encode("utf-8")
    # Only bytes above 0x7F grow or can be undefined: a line's new start is its old one
    # plus what the bytes before it grew by (the table says of each byte value).
    high = np.flatnonzero(data >= 0x80)
    values = data[high]
    grown = np.zeros(len(high) + 1, dtype=np.int64)
    np.cumsum(t.utf8_length[values].astype(np.int64) - 1, out=grown[1:])
    rel = offsets - offsets[0]
    out = _binary(n, rel + grown[np.searchsorted(high, rel, side="left")], text)
    undefined = high[t.undefined[values]]
    if len(undefined):
        bad[np.searchsorted(rel, undefined, side="right") - 1] = True
    return out, bad


WIDE = {"utf-16": None, "utf-16le": "<", "utf-16be": ">"}  # Spark's names; None: by the file's BOM


def wide(encoding: str) -> bool:
    """Whether ``encoding`` (a Spark charset name) is UTF-16, read by 16-bit units."""
    return encoding in WIDE


def byte_order(encoding: str, uri: str) -> str:
    """``<`` or ``>``: the byte order of a UTF-16 file (a local path or URI, or an object)."""
    order = WIDE[encoding]
    if order is None:
        order = _bom_order(uri) if "://" not in uri or uri.startswith("file:") else _object_bom_order(uri)
    return order


def _bom_order(uri: str) -> str:
    from kappa_ingest.source.opening import open_input

    with open_input(uri) as f:
        return "<" if f.read(2) == b"\xff\xfe" else ">"


@lru_cache(maxsize=1024)
def _object_bom_order(uri: str) -> str:
    """An object's (asked once per worker: each batch's parse asks again, and each ask is a request)."""
    return _bom_order(uri)


def utf16_to_utf8(lines: pa.Array, big_endian: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """``lines`` (binary, UTF-16; ``big_endian`` per line) in UTF-8, and which of them hold
    a lone surrogate or an odd byte (decoded as U+FFFD)."""
    if lines.null_count:
        lines = pc.fill_null(lines, b"")
    n = len(lines)
    offsets, data = _offsets_and_data(lines)
    lengths = np.diff(offsets)
    bad = lengths % 2 == 1
    if n == 0 or len(data) == 0:
        return pa.array([b""] * n, pa.binary()), bad
    if not bad.any():
        units = data.view("<u2")
        if big_endian.any():  # read as little-endian, those lines' units swapped
            swap = np.repeat(big_endian, lengths // 2)
            units = units.copy()
            units[swap] = units[swap].byteswap()
        high, low = (units & 0xFC00) == 0xD800, (units & 0xFC00) == 0xDC00
        starts, ends = (offsets[:-1] - offsets[0]) // 2, (offsets[1:] - offsets[0]) // 2
        nonempty = ends > starts
        # A high surrogate is followed by a low one in its line, a low one preceded by a high.
        paired = (
            np.array_equal(high[:-1], low[1:]) and not high[-1] and not low[0]
            and not low[starts[nonempty]].any() and not high[ends[nonempty] - 1].any()
        )  # fmt: skip
        if paired:
            text = units.tobytes().decode("utf-16-le").encode("utf-8")
            width = np.where(units < 0x80, 1, np.where(units < 0x800, 2, np.where(high | low, 2, 3)))
            utf8_ends = np.zeros(len(units) + 1, dtype=np.int64)
            np.cumsum(width, out=utf8_ends[1:])
            return _binary(n, utf8_ends[(offsets - offsets[0]) // 2], text), bad
    # Damaged lines (rare): each decoded on its own, U+FFFD in place of what does not decode.
    texts = []
    for i, raw in enumerate(lines.to_pylist()):
        codec = "utf-16-be" if big_endian[i] else "utf-16-le"
        try:
            texts.append(raw.decode(codec).encode("utf-8"))
        except UnicodeDecodeError:
            bad[i] = True
            texts.append(raw.decode(codec, errors="replace").encode("utf-8", errors="replace"))
    return pa.array(texts, pa.binary()), bad


def _offsets_and_data(lines: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A binary array's offsets (int64) and its data bytes from the first offset on."""
    _, offsets_buf, data_buf = lines.buffers()
    large = pa.types.is_large_binary(lines.type)
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if large else np.int32, count=len(lines) + 1,
                            offset=(8 if large else 4) * lines.offset).astype(np.int64)  # fmt: skip
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]
        if data_buf is not None
        else np.zeros(0, np.uint8)
    )
    return offsets, data


def _binary(n: int, offsets: np.ndarray, text: bytes) -> pa.Array:
    large = len(text) >= 2**31
    return pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        n,
        [None, pa.py_buffer(offsets.astype(np.int64 if large else np.int32)), pa.py_buffer(text)],
    )  # fmt: skip
