"""Lines in a single-byte encoding (Latin-1, Windows-1252, the other ISO-8859 and Windows
code pages) turned into UTF-8 a batch at a time, so such files take the line path.

In these encodings every byte is one character and the line ends and the CSV delimiters
are their ASCII bytes, so Spark's text scan cuts the lines right and each line decodes on
its own. A batch's bytes are decoded in one call; the new line boundaries follow from each
byte's UTF-8 length (a table of 256), with no Python object per line. A byte the encoding
leaves undefined (Windows-1252's 0x81, 0x8D, 0x8F, 0x90, 0x9D) decodes as U+FFFD, as Java's
decoder does for Spark's CSV reader, and its line is marked to be quarantined.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_ASCII_SYNTAX = b"\n\r,;|\t\"' "


@dataclass(frozen=True)
class ByteTable:
    """Per byte value: its UTF-8 length, and whether the encoding leaves it undefined."""

    encoding: str
    utf8_length: np.ndarray  # uint8[256]
    undefined: np.ndarray  # bool[256]


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
    for b in range(256):
        try:
            char = bytes([b]).decode(name)
        except UnicodeDecodeError:
            undefined[b], char = True, "\ufffd"
        if len(char) != 1:
            return None
        lengths[b] = len(char.encode("utf-8"))
    chars = "".join(bytes([b]).decode(name, errors="replace") for b in range(256))
    if bytes(range(256)).decode(name, errors="replace") != chars:  # bytes read together: a multi-byte encoding
        return None
    if _ASCII_SYNTAX.decode(name, errors="replace") != _ASCII_SYNTAX.decode("ascii"):
        return None
    return ByteTable(name, lengths, undefined)


def to_utf8(lines: pa.Array, t: ByteTable) -> tuple[pa.Array, np.ndarray]:
    """``lines`` (binary) in UTF-8, and which of them hold a byte ``t`` leaves undefined."""
    if lines.null_count:  # (the text scan gives none)
        lines = pc.fill_null(lines, b"")
    n = len(lines)
    _, offsets_buf, data_buf = lines.buffers()
    large = pa.types.is_large_binary(lines.type)
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if large else np.int32, count=n + 1, offset=(8 if large else 4)
                            * lines.offset).astype(np.int64)  # fmt: skip
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]
        if data_buf is not None
        else np.zeros(0, np.uint8)
    )
    bad = np.zeros(n, dtype=bool)
    if not (data >= 0x80).any():  # ASCII: already UTF-8
        return lines, bad
    text = data.tobytes().decode(t.encoding, errors="replace").encode("utf-8")
    ends = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum(t.utf8_length[data], out=ends[1:])
    new_offsets = ends[offsets - offsets[0]]
    out_large = large or len(text) >= 2**31
    out = pa.Array.from_buffers(
        pa.large_binary() if out_large else pa.binary(),
        n,
        [None, pa.py_buffer(new_offsets.astype(np.int64 if out_large else np.int32)), pa.py_buffer(text)],
    )  # fmt: skip
    undefined = np.flatnonzero(t.undefined[data])
    if len(undefined):
        bad[np.searchsorted(offsets - offsets[0], undefined, side="right") - 1] = True
    return out, bad
