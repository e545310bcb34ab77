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

from kappa_ingest.errors import InputError
from kappa_ingest.s3.access import S3Access, split_uri, store_error
from kappa_ingest.s3.objects import StoreObject, head

SUFFIXES = (".csv", ".csv.gz")
HEADS_AT_ONCE = 16


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


def _first_magic(key: str) -> int:
    return min(i for i, c in enumerate(key) if c in "*?[")


def _matches(key: str, pattern: str) -> bool:
    """A glob's match as on local paths: segment by segment, ``*`` never crossing ``/``."""
    parts, wanted = key.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted, strict=True))
