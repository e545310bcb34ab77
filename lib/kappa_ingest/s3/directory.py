"""A directory a run writes its reports to: a local one, or a prefix in a store
(``--metrics-dir s3://bucket/kappa-metrics``), so that a cluster's runs, from whichever
host their drivers ran on, land in one place.

What is kept there is small: ``summary.json`` files (one PUT each: a reader sees the old
report or the new one, never half), the Data Docs, the quarantine's parts (each written by
the task that found its rows) and the Delta tables, which delta-rs writes itself
(:meth:`Directory.table` gives it the table's URI and the store's settings).

delta-rs finds keys by its own chain. On AWS itself that is the SDK's (the environment,
profiles, SSO, a container's or instance's role); given an endpoint (an S3-compatible
store) it reads only the environment and an instance's role, so there a profile's static
keys (``AWS_PROFILE``, ``AWS_SHARED_CREDENTIALS_FILE``, ``AWS_CONFIG_FILE``) are read here
and handed to it, remembered as secrets so that no error or report prints them (delta-rs
itself sets them in the driver's environment). Commits use conditional PUTs
(``If-None-Match``, which AWS S3 and S3Proxy honour), so two runs appending at once cannot
overwrite each other's log entry.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kappa_ingest.errors import KappaError
from kappa_ingest.s3.access import S3Access, canonical, is_s3, profile_keys, store_error

ROLE, OPTION = "metrics dir", "--metrics-dir"


@dataclass(frozen=True)
class Directory:
    root: str  # a local path, or s3://bucket/prefix (no trailing slash)
    access: S3Access | None = None  # how to reach the store, for a root in one

    @classmethod
    def at(cls, where: str | Path | Directory, endpoint: str | None = None) -> Directory:
        """``where`` as a directory; an ``s3://`` (or ``s3a://``) one reached at ``endpoint``
        (else ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, else AWS)."""
        if isinstance(where, Directory):
            return where
        where = str(where)
        if is_s3(where):
            return cls(canonical(where).rstrip("/"), S3Access.resolve(endpoint))
        return cls(where)

    def __str__(self) -> str:
        return self.root

    @property
    def in_store(self) -> bool:
        return self.access is not None

    def join(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def quick(self) -> Directory:
        """The same directory, a store's requests tried once (a failed run's last report)."""
        return self if self.access is None else replace(self, access=self.access.quick())

    def sub(self, *parts: str) -> Directory:
        return replace(self, root=self.join(*parts))

    def read_bytes(self, *parts: str) -> bytes | None:
        """The file's bytes; None if there is none."""
        if self.access is None:
            path = Path(self.root, *parts)
            return path.read_bytes() if path.is_file() else None
        try:
            with self.access.filesystem().open_input_stream(self._key(*parts)) as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self._error(e, *parts) from e

    def read_text(self, *parts: str) -> str | None:
        data = self.read_bytes(*parts)
        return None if data is None else data.decode()

    def write_text(self, text: str, *parts: str) -> str:
        """Write the file whole (a reader sees the old text or the new); where it is."""
        if self.access is None:
            path = Path(self.root, *parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(path)
            return str(path)
        with self.open_output(*parts) as f:
            f.write(text.encode())
        return self.join(*parts)

    @contextmanager
    def open_output(self, *parts: str) -> Iterator[Any]:
        """A file to write in a store, streamed (a multipart upload, visible once closed).
        The store's refusals as the project's errors; the block's own errors as they are."""
        if self.access is None:
            raise ValueError("open_output writes into a store; a local file is written with write_text")
        try:
            f = self.access.filesystem().open_output_stream(self._key(*parts))
        except OSError as e:
            raise self._error(e, *parts) from e
        try:
            yield f
        except BaseException:
            with contextlib.suppress(OSError):
                f.close()
            raise
        try:
            f.close()
        except OSError as e:
            raise self._error(e, *parts) from e

    def children(self, *parts: str) -> list[str]:
        """The names of the directories in ``parts``, sorted; none if it is not there."""
        return self._entries(True, *parts)

    def files(self, *parts: str) -> list[str]:
        """The names of the files in ``parts``, sorted; none if it is not there."""
        return self._entries(False, *parts)

    def _entries(self, directories: bool, *parts: str) -> list[str]:
        if self.access is None:
            path = Path(self.root, *parts)
            return sorted(p.name for p in path.iterdir() if p.is_dir() == directories) if path.is_dir() else []
        from pyarrow import fs

        try:
            found = self.access.filesystem().get_file_info(fs.FileSelector(self._key(*parts), allow_not_found=True))
        except OSError as e:
            raise self._error(e, *parts) from e
        kind = fs.FileType.Directory if directories else fs.FileType.File
        return sorted(i.base_name for i in found if i.type == kind)

    def put_tree(self, local: Path, *parts: str) -> str:
        """Copy the local directory ``local`` here, under ``parts``; where it is."""
        if self.access is None:
            raise ValueError("put_tree copies into a store; a local directory is written in place")
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            rel = path.relative_to(local).parts
            try:
                with self.access.filesystem().open_output_stream(self._key(*parts, *rel)) as f:
                    f.write(path.read_bytes())
            except OSError as e:
                raise self._error(e, *parts, *rel) from e
        return self.join(*parts)

    def table(self, *parts: str) -> tuple[str, dict[str, str]]:
        """A Delta table's URI here, and the settings delta-rs needs to reach it."""
        if self.access is None:
            return str(Path(self.root, *parts).resolve()), {}
        return self.join(*parts), delta_options(self.access)

    def arrow_filesystem(self, *parts: str) -> Any:
        """Arrow's own filesystem rooted at ``parts`` here (a Delta table's files, for a scan)."""
        from pyarrow import fs

        if self.access is None:
            return fs.SubTreeFileSystem(str(Path(self.root, *parts).resolve()), fs.LocalFileSystem())
        return fs.SubTreeFileSystem(self._key(*parts), self.access.filesystem())

    def check(self) -> None:
        """Refuse a store that cannot be reached, or a bucket that is not there, before a run
        needs it (exit 4, or exit 3 for a missing bucket)."""
        if self.access is None:
            return
        from pyarrow import fs

        quick = self.access.quick()
        bucket = self.root.removeprefix("s3://").split("/", 1)[0]
        try:
            info = quick.filesystem().get_file_info(bucket)
        except OSError as e:
            raise store_error(e, self.root, quick, ROLE, OPTION) from e
        if info.type == fs.FileType.NotFound:
            raise store_error(OSError("NO_SUCH_BUCKET"), self.root, quick, ROLE, OPTION)

    def _key(self, *parts: str) -> str:
        return self.join(*parts).removeprefix("s3://")

    def _error(self, e: OSError, *parts: str) -> KappaError:
        assert self.access is not None
        return store_error(e, self.join(*parts), self.access, ROLE, OPTION)


def delta_options(access: S3Access) -> dict[str, str]:
    """delta-rs's settings for the store ``access`` reaches, keys included where only a
    profile holds them."""
    options = {"AWS_REGION": access.region, "conditional_put": "etag",
               # the same bounds as the project's own requests (object_store's: 10 retries over 180 s)
               "connect_timeout": f"{access.connect_timeout_s:g}s", "timeout": f"{access.request_timeout_s:g}s",
               "max_retries": str(access.attempts - 1), "retry_timeout": "60s"}  # fmt: skip
    if access.endpoint:
        options["AWS_ENDPOINT_URL"] = access.endpoint
        options["AWS_ALLOW_HTTP"] = "true" if access.endpoint.startswith("http:") else "false"
        if not os.environ.get("AWS_ACCESS_KEY_ID"):  # (on AWS itself, delta-rs's chain reads profiles too)
            options.update(profile_keys())
    return options


MetricsDir = str | Path | Directory  # what --metrics-dir gives, or the directory made of it
