"""An ``s3://`` input's objects, each with the size and ETag that are its identity.

``s3://bucket/key`` names one object; ``s3://bucket/prefix/`` every ``.csv``/``.csv.gz``
object directly under the prefix (as a local directory names its files, not its
subdirectories'); a glob (``*``, ``?``, ``[...]``) matches keys as it matches local paths,
``/`` only by ``/``. ``s3a://`` is the same thing. The driver lists (ListObjectsV2, paged)
and asks each object's ETag (a HEAD each, several at a time: the listing pyarrow gives has
none); an object is refused as a local file is: empty (0 bytes) is exit 3, and so is a
listing that finds nothing.
"""

from __future__ import annotations

import fnmatch
import glob
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlparse

from kappa_ingest.errors import InputError
from kappa_ingest.s3.access import S3Access, store_error

SUFFIXES = (".csv", ".csv.gz")
HEADS_AT_ONCE = 16


@dataclass(frozen=True)
class StoreObject:
    uri: str  # s3://bucket/key, whatever scheme the input was given with
    size: int
    mtime_ms: int
    etag: str


def split_uri(uri: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key`` (``s3a://`` alike)."""
    url = urlparse(uri)
    if not url.netloc:
        raise InputError(f"input {uri}: no bucket; give s3://BUCKET/KEY")
    return url.netloc, url.path.lstrip("/")


def canonical(uri: str) -> str:
    """The one name of an object: ``s3a://b/k`` is ``s3://b/k``."""
    bucket, key = split_uri(uri)
    return f"s3://{bucket}/{key}"


def list_objects(item: str, access: S3Access) -> list[StoreObject]:
    """The objects ``item`` names, in key order, with their ETags."""
    from pyarrow import fs

    filesystem = access.filesystem()
    bucket, key = split_uri(item)
    try:
        if glob.has_magic(key):
            base = key[: key.rfind("/", 0, _first_magic(key)) + 1]  # the prefix before the first wildcard's segment
            deep = "/" in key[len(base) :]
            selector = fs.FileSelector(f"{bucket}/{base}".rstrip("/"), allow_not_found=True, recursive=deep)
            infos = [i for i in filesystem.get_file_info(selector)
                     if i.type == fs.FileType.File and _matches(i.path[len(bucket) + 1 :], key)]  # fmt: skip
            if not infos:
                raise InputError(f"input {item}: no object matches; check the --input pattern")
        elif key == "" or key.endswith("/"):
            selector = fs.FileSelector(f"{bucket}/{key}".rstrip("/"), allow_not_found=True, recursive=False)
            infos = [i for i in filesystem.get_file_info(selector)
                     if i.type == fs.FileType.File and i.path.endswith(SUFFIXES)]  # fmt: skip
            if not infos and filesystem.get_file_info(bucket).type == fs.FileType.NotFound:
                raise InputError(f"input {item}: no such bucket at {access.where()}; check --input (and --s3-endpoint)")
            if not infos:
                raise InputError(f"input {item}: no .csv or .csv.gz objects under this prefix")
        else:
            infos = [None]  # one object: its HEAD below says whether it is there
        keys = [key] if infos == [None] else [i.path[len(bucket) + 1 :] for i in infos]
        with ThreadPoolExecutor(min(HEADS_AT_ONCE, len(keys))) as pool:
            found = list(pool.map(lambda k: head(f"s3://{bucket}/{k}", access), sorted(keys)))
    except OSError as e:
        raise store_error(e, item, access) from e
    for o in found:
        if o.size == 0:
            raise InputError(f"input {o.uri}: empty (0 bytes); give a CSV object with a header line, or leave it out")
    return found


def head(uri: str, access: S3Access) -> StoreObject:
    """The object's size, modification time and ETag, from one HEAD."""
    bucket, key = split_uri(uri)
    try:
        f = access.filesystem().open_input_file(f"{bucket}/{key}")
    except OSError as e:
        raise store_error(e, uri, access) from e
    try:
        meta = f.metadata()
        size = f.size()
    finally:
        f.close()
    etag = meta.get("ETag", b"").decode().strip('"')
    return StoreObject(canonical(uri), size, _modified_ms(meta.get("Last-Modified", b"").decode()), etag)


def _modified_ms(value: str) -> int:
    from datetime import datetime
    from email.utils import parsedate_to_datetime

    if not value:
        return 0
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        when = parsedate_to_datetime(value)
    return int(when.timestamp() * 1000)


def _first_magic(key: str) -> int:
    return min(i for i, c in enumerate(key) if c in "*?[")


def _matches(key: str, pattern: str) -> bool:
    """A glob's match as on local paths: segment by segment, ``*`` never crossing ``/``."""
    parts, wanted = key.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted, strict=True))
