"""An ``s3://`` input's objects, each with the size and ETag that are its identity.

``s3://bucket/key`` names one object; ``s3://bucket/prefix/`` every ``.csv``/``.csv.gz``
object directly under the prefix (as a local directory names its files, not its
subdirectories'); a glob (``*``, ``?``, ``[...]``) matches keys as it matches local paths,
``/`` only by ``/``. ``s3a://`` is the same thing. The driver lists (ListObjectsV2, paged,
the prefix as long as the glob allows) and takes each object's ETag from the listing
(``signed_list``); only where the keys are not plain values (a role, SSO, an instance)
does it list through pyarrow and ask each ETag with a HEAD, several at a time. An object is
refused as a local file is: empty (0 bytes) is exit 3, and so is a listing that finds nothing.
"""

from __future__ import annotations

import fnmatch
import glob
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kappa_ingest.errors import InputError
from kappa_ingest.s3 import signed_list
from kappa_ingest.s3.access import S3Access, canonical, split_uri, store_error
from kappa_ingest.s3.objects import StoreObject, head

SUFFIXES = (".csv", ".csv.gz")
HEADS_AT_ONCE = 16


def list_objects(item: str, access: S3Access, allow_empty: bool = False, signed: bool = True) -> list[StoreObject]:
    """The objects ``item`` names, in key order, with their ETags; ``allow_empty``: a prefix
    or glob that finds nothing is no objects, not an error (a landing prefix watched);
    ``signed=False``: through pyarrow with a HEAD each even where plain keys are at hand
    (``kappa-ingest bench --listing`` compares the two)."""
    bucket, key = split_uri(item)
    try:
        found = (
            _listed(item, bucket, key, access, allow_empty, signed)
            if glob.has_magic(key) or key.endswith("/") or not key
            else [head(canonical(item), access)]
        )
    except OSError as e:
        raise store_error(e, item, access) from e
    for o in found:
        if o.size == 0:
            raise InputError(f"input {o.uri}: empty (0 bytes); give a CSV object with a header line, or leave it out")
    return found


def _listed(item: str, bucket: str, key: str, access: S3Access, allow_empty: bool, signed: bool) -> list[StoreObject]:
    if glob.has_magic(key):
        prefix = key[: _first_magic(key)]
        base = key[: prefix.rfind("/") + 1]  # the prefix before the first wildcard's segment
        deep = "/" in key[len(base) :]
        wanted: Callable[[str], bool] = lambda k: _matches(k, key)  # noqa: E731
        nothing = f"input {item}: no object matches; check the --input pattern"
    else:
        prefix = base = key
        deep = False
        wanted = lambda k: k.endswith(SUFFIXES)  # noqa: E731
        nothing = f"input {item}: no .csv or .csv.gz objects under this prefix"
    pages = signed_list.pages(bucket, prefix, access, "" if deep else "/") if signed else None
    if pages is not None:
        found = [o for page in pages for o in page if wanted(split_uri(o.uri)[1])]
    else:
        found = _listed_with_heads(bucket, base, deep, wanted, access)
    if not found and not allow_empty:
        raise InputError(nothing)
    return sorted(found, key=lambda o: o.uri)


def _listed_with_heads(
    bucket: str, base: str, deep: bool, wanted: Callable[[str], bool], access: S3Access
) -> list[StoreObject]:
    """pyarrow's listing (its SDK finds keys wherever the chain keeps them), which has no
    ETags: a HEAD each."""
    from pyarrow import fs

    filesystem = access.filesystem()
    selector = fs.FileSelector(f"{bucket}/{base}".rstrip("/"), allow_not_found=True, recursive=deep)
    keys = sorted(k for i in filesystem.get_file_info(selector)
                  if i.type == fs.FileType.File and wanted(k := i.path[len(bucket) + 1 :]))  # fmt: skip
    if not keys and filesystem.get_file_info(bucket).type == fs.FileType.NotFound:
        raise InputError(f"input s3://{bucket}/: no such bucket at {access.where()}; check --input (and --s3-endpoint)")
    if not keys:
        return []
    with ThreadPoolExecutor(min(HEADS_AT_ONCE, len(keys))) as pool:
        return list(pool.map(lambda k: head(f"s3://{bucket}/{k}", access), keys))


def _first_magic(key: str) -> int:
    return min(i for i, c in enumerate(key) if c in "*?[")


def _matches(key: str, pattern: str) -> bool:
    """A glob's match as on local paths: segment by segment, ``*`` never crossing ``/``."""
    parts, wanted = key.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted, strict=True))
