"""The run's input files: local files, directories and globs expanded, checked readable.

Light on purpose (no Spark, no Arrow): the command line checks its inputs with it before
the JVM starts. What a local file must be, before any of it is read:

- a regular file (not a FIFO, socket or device: reading one could block forever), reached
  through no broken or looping symbolic link, readable, and not empty (0 bytes);
- text: its first 64 KiB (:func:`check_head`, called where the header is read) do not
  look like binary data or a compressed stream under a ``.csv`` name.

Each refusal is an InputError (exit 3) naming the file and the fix; a directory or glob
holding such a file is refused too (a FIFO in a landing directory is a mistake, not
something to skip silently).
"""

from __future__ import annotations

import errno
import glob
import os
import stat
import zlib
from pathlib import Path
from urllib.parse import urlparse

from kappa_ingest.errors import InputError
from kappa_ingest.s3.access import is_s3
from kappa_ingest.s3.listing import SUFFIXES, list_objects

HEAD_BYTES = 64 << 10  # how much of a file the text checks look at
GZIP_MAGIC = b"\x1f\x8b"
# Signatures of files that are not CSV text, for the message (gzip is told apart: it has a fix).
MAGIC = {
    b"PK\x03\x04": "a zip archive (or an Excel .xlsx workbook)",
    b"%PDF-": "a PDF document",
    b"PAR1": "a Parquet file",
    b"BZh": "a bzip2-compressed file",
    b"\xfd7zXZ\x00": "an xz-compressed file",
    b"\x28\xb5\x2f\xfd": "a zstd-compressed file",
    b"ORC": "an ORC file",
    b"\x89PNG": "a PNG image",
    b"\xd0\xcf\x11\xe0": "an old Office document (.xls)",
}
# Bytes no CSV text holds: C0 controls but tab, line feed, vertical tab, form feed,
# carriage return and escape; and DEL.
CONTROL = bytes([*range(0x00, 0x09), *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])
BINARY_SHARE = 0.01  # more than this share of control bytes in the head (and ...
BINARY_MIN = 8  # ... at least this many) is binary data


def resolve_inputs(inputs: tuple[str, ...]) -> tuple[list[str], int]:
    """Expand local files, directories and globs, and objects in a store (``s3://``: keys,
    prefixes and globs, :mod:`kappa_ingest.s3.listing`), to the ``.csv``/``.csv.gz`` files
    they name.

    URIs with another scheme (``hdfs://``) are passed to Spark as given. Returns the paths
    and the bytes found (local files and objects). InputError names an input that is
    missing, not a regular file, a symbolic link that loops or leads nowhere, unreadable
    or empty; StoreUnavailable (exit 4) a store out of reach or refusing the credentials.
    """
    paths: list[str] = []
    total = 0
    for item in inputs:
        scheme = urlparse(item).scheme
        if is_s3(item):
            from kappa_ingest.source.opening import store

            objects = list_objects(item, store().access.quick())
            paths += [o.uri for o in objects]
            total += sum(o.size for o in objects)
            continue
        if scheme not in ("", "file"):
            paths.append(item)
            continue
        local = item.removeprefix("file://")
        if glob.has_magic(local):
            matches = [p for p in sorted(glob.glob(local)) if _regular(p, item)]
            if not matches:
                raise InputError(f"input {item}: no file matches; check the --input pattern")
        elif os.path.isdir(local):
            found = sorted(str(p) for p in Path(local).iterdir() if p.name.endswith(SUFFIXES))
            matches = [p for p in found if _regular(p, item)]
            if not matches:
                raise InputError(f"input {item}: directory has no .csv or .csv.gz files")
        else:
            _regular(local, item, named=True)
            matches = [local]
        for m in matches:
            if not os.access(m, os.R_OK):
                raise InputError(f"input {m}: not readable (permissions); fix its mode or run as its owner")
            size = os.path.getsize(m)
            if size == 0:
                raise InputError(f"input {m}: empty (0 bytes); give a CSV file with a header line, or leave it out")
            total += size
            paths.append(os.path.abspath(m))
    return paths, total


def _regular(path: str, item: str, named: bool = False) -> bool:
    """Whether ``path`` is a regular file to read (a directory found by a glob or in a
    directory is not, and is passed over); InputError for anything else that is not one.
    ``named``: the path is the --input itself (a directory was handled before)."""
    where = f"input {path}" if path == item else f"input {path} (in --input {item})"
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{where}: a symbolic link loop (it leads back to itself); fix or remove the link") from e
        if os.path.islink(path):
            target = os.readlink(path)
            raise InputError(f"{where}: a broken symbolic link (to {target}, which does not exist);"
                             " fix or remove the link") from e  # fmt: skip
        if named:
            raise InputError(f"input {item}: no such file or directory; check --input") from e
        raise InputError(f"{where}: cannot be read ({e.strerror}); check the file") from e
    if stat.S_ISREG(st.st_mode):
        return True
    if stat.S_ISDIR(st.st_mode) and not named:
        return False
    kind = (
        "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
        else "a socket" if stat.S_ISSOCK(st.st_mode)
        else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
        else "not a file"
    )  # fmt: skip
    raise InputError(f"{where}: not a regular file ({kind}; reading it could wait forever); give a CSV file")


def not_text(head: bytes, first_line_end: int | None = None, delimiter: str = ",") -> str | None:
    """Why bytes read from a file's start (up to ``HEAD_BYTES`` of them) are not CSV text,
    or None. ``first_line_end``: where its first line ends, if known. Binary means a known
    file signature, a NUL byte in the first line (a header never has one), or more than 1%
    (and at least 8) control bytes (the ``delimiter`` is not one: a file may be delimited
    by a control character, such as the unit separator); a few NUL or control bytes inside
    fields further on are data, sent as they are."""
    head = head[:HEAD_BYTES]
    for magic, what in MAGIC.items():
        if head.startswith(magic):
            return f"{what}, not CSV text"
    first = head[:first_line_end] if first_line_end is not None else head.split(b"\n", 1)[0]
    if b"\x00" in first:
        return "a NUL byte in its first line: binary data, or text in an encoding with NUL bytes (UTF-16, UTF-32)"
    control = (
        CONTROL.replace(delimiter.encode("latin-1"), b"") if len(delimiter) == 1 and delimiter < "\x80" else CONTROL
    )
    controls = len(head) - len(head.translate(None, control))
    if controls >= BINARY_MIN and controls > BINARY_SHARE * len(head):
        share = controls / len(head)
        return f"{share:.0%} of its first {len(head):,} bytes are control bytes: binary data, not CSV text"
    return None


def check_head(
    path: str, head: bytes, compressed: bool, first_line_end: int | None = None, delimiter: str = ","
) -> None:
    """InputError unless the first bytes of ``path`` (decompressed, if ``compressed``) are
    CSV text: a gzip stream under a plain ``.csv`` name, or binary data, is refused."""
    if not compressed and head.startswith(GZIP_MAGIC):
        raise InputError(
            f"input {path}: gzip-compressed, but its name does not end in .gz; rename it to"
            f" {Path(path).name}.gz (Spark decompresses files by their name)"
        )
    why = not_text(head, first_line_end, delimiter)
    if why is not None:
        raise InputError(
            f"input {path}: not a text file ({why}); give CSV files only, or the file's encoding with --encoding"
        )


SAMPLE_BYTES = 1 << 20
# Files of a many-file input read for the estimate: the 8 largest and 8 spread over the
# others, which are taken to be like them, by bytes (a watch batch of 250 small files read
# them all: 0.2 s of every batch).
SAMPLE_FILES = 16


def estimate_rows(paths: list[str], header: bool) -> int | None:
    """Rows expected from the files' sizes and the line length of their first megabyte
    (uncompressed size estimated for gzip), of at most SAMPLE_FILES files of each kind
    (plain, gzip); None for remote inputs."""
    if any("://" in p or not os.path.isfile(p) for p in paths):
        return None
    total_lines = 0.0
    for kind in (False, True):
        sizes = {p: os.path.getsize(p) for p in paths if p.endswith(".gz") == kind}
        largest = sorted((p for p, n in sizes.items() if n), key=lambda p: -sizes[p])
        if not largest:
            continue
        rest = largest[SAMPLE_FILES // 2 :]
        sampled = largest[: SAMPLE_FILES // 2] + rest[:: -(-len(rest) // (SAMPLE_FILES // 2)) or 1]
        heads = {p: _head_lines(p) for p in sampled}
        usual = sum(n for n, _ in heads.values()) / sum(b for _, b in heads.values())  # by bytes read
        total_lines += sum(n * (heads[p][0] / heads[p][1] if p in heads else usual) for p, n in sizes.items())
    return max(0, round(total_lines - (len(paths) if header else 0)))


def _head_lines(path: str) -> tuple[int, int]:
    """Lines in the file's first megabyte (inflated for gzip), and that megabyte's bytes as stored."""
    with open(path, "rb") as f:
        head = f.read(SAMPLE_BYTES)
    sample = zlib.decompressobj(wbits=31).decompress(head) if path.endswith(".gz") else head
    return sample.count(b"\n") or 1, max(1, len(head))
