"""An object's bytes, read where they are needed (the driver's header, a task's split).

:func:`open_object` answers a file-like object whose every ``read(n)`` is one ranged GET
(pyarrow's S3 file does no read-ahead): its readers ask for megabytes at a time. It checks
the object is the one the run planned (its ETag, from the HEAD that opens it): an object
overwritten since is refused, named, not read as a mix of two versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.s3.access import S3Access, canonical, split_uri, store_error


@dataclass(frozen=True)
class StoreObject:
    uri: str  # s3://bucket/key, whatever scheme the input was given with
    size: int
    mtime_ms: int
    etag: str


class ObjectChanged(InputError):
    """An object is no longer the one the run planned (overwritten, or deleted)."""


def open_object(uri: str, access: S3Access, etag: str = "") -> Any:
    """The object at ``uri`` for reading (``read``, ``seek``, ``read_at``, ``size``, a context
    manager); ``etag``: the one the run planned, else ObjectChanged."""
    bucket, key = split_uri(uri)
    try:
        f = access.filesystem().open_input_file(f"{bucket}/{key}")
    except FileNotFoundError as e:
        if etag:
            raise ObjectChanged(f"input {uri} was deleted after the run planned it; send it again") from e
        raise store_error(e, uri, access) from e
    except OSError as e:
        raise store_error(e, uri, access) from e
    now = _etag(f.metadata())
    if etag and now != etag:
        f.close()
        raise ObjectChanged(
            f"input {uri} was overwritten after the run planned it (ETag {etag} -> {now}): what was sent of it"
            " may be of either version; send it again once nothing writes to it"
        )
    return f


def head(uri: str, access: S3Access) -> StoreObject:
    """The object's size, modification time and ETag, from one HEAD."""
    with open_object(uri, access) as f:
        meta, size = f.metadata(), f.size()
    return StoreObject(canonical(uri), size, modified_ms(meta.get("Last-Modified", b"").decode()), _etag(meta))


def _etag(meta: dict) -> str:
    return meta.get("ETag", b"").decode().strip('"')


def modified_ms(value: str) -> int:
    """An object's time, to the second: a HEAD's Last-Modified has no finer unit and a
    listing's may, and the ledger compares the two (an object named alone, then by its prefix)."""
    from datetime import datetime
    from email.utils import parsedate_to_datetime

    if not value:
        return 0
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        when = parsedate_to_datetime(value)
    return int(when.timestamp()) * 1000


def read_ranges(f: Any, ranges: list[tuple[int, int]], gap: int = 1 << 20) -> dict[int, bytes]:
    """The bytes of each ``(offset, length)`` of an open object, read with few GETs: ranges
    less than ``gap`` apart are read as one. Keyed by offset."""
    out: dict[int, bytes] = {}
    todo = sorted(set(ranges))
    i = 0
    while i < len(todo):
        lo, hi = todo[i][0], todo[i][0] + todo[i][1]
        j = i + 1
        while j < len(todo) and todo[j][0] <= hi + gap:
            hi = max(hi, todo[j][0] + todo[j][1])
            j += 1
        block = f.read_at(hi - lo, lo)
        for at, length in todo[i:j]:
            out[at] = block[at - lo : at - lo + length]
        i = j
    return out


def put(path: Path, uri: str, access: S3Access) -> StoreObject:
    """The local file ``path`` as the object ``uri``, streamed (its bucket made if missing:
    a newcomer's first object in a local store); the object as stored."""
    from pyarrow import fs

    bucket, key = split_uri(uri)
    if not key or key.endswith("/"):
        raise UsageError(f"{uri}: name the object, s3://BUCKET/KEY")
    filesystem = access.filesystem(create_buckets=True)
    try:
        if filesystem.get_file_info(bucket).type == fs.FileType.NotFound:
            filesystem.create_dir(bucket)
        with open(path, "rb") as f, filesystem.open_output_stream(f"{bucket}/{key}", compression=None) as out:
            while chunk := f.read(8 << 20):
                out.write(chunk)
    except OSError as e:
        raise store_error(e, uri, access, "object", "the object's URI") from e
    return head(uri, access)
