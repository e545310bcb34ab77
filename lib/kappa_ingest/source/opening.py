"""An input's bytes, wherever it is: a local file (a path or ``file:`` URI) or an object in
a store (``s3://``), opened the same way by the driver (a header) and by the tasks (their
splits, lines moved by offset).

A task learns how to reach the store from its parser (``LineParser.store``: the endpoint,
the region and each object's planned ETag; no key, see :mod:`kappa_ingest.s3.access`) and
registers it for its worker (:func:`use`); the driver's is resolved from its settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from kappa_ingest.s3.access import S3Access, is_s3


@dataclass(frozen=True)
class Store:
    """How a worker reaches the run's objects, and the ETag each was planned with."""

    access: S3Access
    etags: Mapping[str, str] = field(default_factory=dict)  # s3://bucket/key -> ETag


_store: Store | None = None


def use(store: Store | None) -> None:
    """The store this worker's reads go to (a task registers its run's)."""
    global _store
    if store is not None:
        _store = store


def for_run(endpoint: str | None) -> None:
    """The driver's store for a run: ``endpoint`` (``--s3-endpoint``) or the environment's."""
    use(Store(S3Access.resolve(endpoint)))


def store() -> Store:
    return _store if _store is not None else Store(S3Access.resolve())


def local_path(uri: str) -> str:
    """A local file's path from its name as given or as Spark names it (``file:/a%20b.csv``)."""
    return unquote(urlparse(uri).path) if uri.startswith("file:") else uri


GZIP_BUFFER_BYTES = 8 << 20  # one GET per this many compressed bytes (the decompressor asks for little at a time)


def open_input(uri: str, decompress: bool = False) -> BinaryIO | Any:
    """``uri`` opened for binary reading (``read``, ``seek`` unless decompressed; a context
    manager); ``decompress``: a ``.gz`` file's text, streamed."""
    if is_s3(uri):
        import pyarrow as pa

        from kappa_ingest.s3.access import canonical
        from kappa_ingest.s3.objects import open_object

        s = store()
        name = canonical(uri)
        raw = open_object(name, s.access, s.etags.get(name, ""))
        if decompress and uri.endswith(".gz"):
            return pa.CompressedInputStream(pa.BufferedInputStream(raw, GZIP_BUFFER_BYTES), "gzip")
        return raw
    if decompress and uri.endswith(".gz"):
        import gzip

        return gzip.open(local_path(uri), "rb")
    return open(local_path(uri), "rb")


def needs_spark_reader(uri: str, multiline: bool, escape: str, quote: str, encoding: str = "utf-8") -> str:
    """Why objects in a store cannot be read as a run asks: only the tasks' own reading of
    lines reaches a store, and the run asks for Spark's CSV reader."""
    why = ("--multiline (a record over several lines)" if multiline
           else f"--escape {escape!r} (an escape other than the quote)" if escape != quote
           else f"--encoding {encoding}")  # fmt: skip
    return (
        f"input {uri}: objects in a store are read line by line by the tasks, and {why} needs Spark's CSV"
        " reader, which cannot reach the store here: copy the files to a path every executor can read, or"
        " convert them (one record per line, the quote as its own escape, UTF-8)"
    )
