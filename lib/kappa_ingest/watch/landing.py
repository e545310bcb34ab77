"""Which files of a landing directory (a local directory, a glob, or an ``s3://`` prefix)
are ready to send.

A file is a candidate when it is a ``.csv`` or ``.csv.gz`` whose name is not a writer's
scratch name: hidden (``.x``), ``_x``, ``x._COPYING_`` (Hadoop's copy), ``x.tmp``,
``x.filepart`` (WinSCP), ``x.part``, ``x.crdownload``. It is ready once its size and
modification time (an object's ETag too) have not changed for ``min_age_s``, counted on
this process's own monotonic clock from when the watch first saw them so, or at once if its
modification time is already that old (a file written elsewhere and renamed in). Readiness only
spares work: a file that changes while a batch reads it is refused by the tasks' own
check of size and time (``source.splits``), never sent as a mix of two versions.

A writer that writes elsewhere and renames into the directory is never seen half-written;
one that writes in place is seen once its file has been still for ``min_age_s``, which a
slow writer can outlast (docs say so).
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kappa_ingest.s3.access import S3Access, is_s3
from kappa_ingest.s3.listing import SUFFIXES, list_objects

SCRATCH_PREFIXES = (".", "_")
SCRATCH_SUFFIXES = ("._COPYING_", ".tmp", ".filepart", ".part", ".crdownload")


@dataclass(frozen=True)
class Landed:
    """A file as one listing saw it."""

    path: str  # absolute local path, or s3://bucket/key
    size: int
    mtime_ms: int
    version: str = ""  # an object's ETag

    def identity(self) -> tuple[int, int, str]:
        return self.size, self.mtime_ms, self.version


def is_scratch(name: str) -> bool:
    """A name a writer uses while the file is not finished, or not a CSV at all."""
    return name.startswith(SCRATCH_PREFIXES) or name.endswith(SCRATCH_SUFFIXES) or not name.endswith(SUFFIXES)


def list_landed(where: str, access: S3Access | None = None) -> list[Landed]:
    """The candidates under ``where`` now, in path order; an empty directory or prefix is
    none (not an error, as it is for ``ingest``). Subdirectories are not entered, as for
    ``ingest --input DIR``; a glob matches as it does there."""
    if is_s3(where):
        assert access is not None, "an s3:// landing needs the store's settings"
        found = [Landed(o.uri, o.size, o.mtime_ms, o.etag) for o in list_objects(where, access, allow_empty=True)]
        return [f for f in found if not is_scratch(f.path.rsplit("/", 1)[-1])]
    local = where.removeprefix("file://")
    names = sorted(glob.glob(local)) if glob.has_magic(local) else [str(p) for p in sorted(Path(local).iterdir())]
    out = []
    for path in names:
        if is_scratch(os.path.basename(path)):
            continue
        try:
            st = os.stat(path)
        except FileNotFoundError:  # moved away between the listing and now
            continue
        if stat.S_ISREG(st.st_mode):
            out.append(Landed(os.path.abspath(path), st.st_size, st.st_mtime_ns // 1_000_000))
    return out


class Settling:
    """Files seen, each ready once it has been still for ``min_age_s``."""

    def __init__(self, min_age_s: float) -> None:
        self.min_age_s = min_age_s
        self._still_since: dict[str, tuple[tuple[int, int, str], float]] = {}

    def ready(self, listing: Iterable[Landed], now: float, wall_s: float | None = None) -> list[Landed]:
        """Of ``listing`` (everything there now), the files still long enough, in path
        order. A file gone from the listing is forgotten (moved away, or sent and moved).
        With ``wall_s`` (the time now), a file last modified ``min_age_s`` before it is still
        at first sight: one written elsewhere and renamed in is sent without waiting."""
        seen: dict[str, tuple[tuple[int, int, str], float]] = {}
        out = []
        for f in listing:
            before = self._still_since.get(f.path)
            since = before[1] if before is not None and before[0] == f.identity() else now
            if wall_s is not None and wall_s - f.mtime_ms / 1000 >= self.min_age_s:
                since = min(since, now - self.min_age_s)
            seen[f.path] = (f.identity(), since)
            if now - since >= self.min_age_s:
                out.append(f)
        self._still_since = seen
        return sorted(out, key=lambda f: f.path)

    def waiting(self, now: float) -> list[tuple[str, float]]:
        """Each file seen and not yet ready, with how long it has been still."""
        return [(p, now - s) for p, (_, s) in sorted(self._still_since.items()) if now - s < self.min_age_s]
