"""What becomes of a landed file once it is in the topic (``--after-send``), or once it is
found unsendable (``--error-dir``).

Each step is idempotent: it runs only after the file's last unit is committed (the ledger
says so), and a watch killed between that commit and the step runs it at its next start,
without sending anything again (the ledger still says the file is in). A moved file keeps
its name; one already there (moved before a crash) is not moved twice.
"""

from __future__ import annotations

import os
from pathlib import Path

from kappa_ingest.s3.access import is_s3, split_uri
from kappa_ingest.source import opening
from kappa_ingest.watch.landing import Landed


def after_send(f: Landed, how: str) -> str | None:
    """Run ``how`` (keep, delete, move:DIR) on a file in the topic; what was done, or None."""
    if how == "keep":
        return None
    if how == "delete":
        _remove(f.path)
        return "deleted"
    target = how.removeprefix("move:")
    _move(f.path, target)
    return f"moved to {target}"


def to_error_dir(f: Landed, reason: str, error_dir: str) -> str:
    """Move an unsendable file into ``error_dir`` and write its reason beside it
    (``NAME.error.txt``); the file's new place."""
    name = f.path.rsplit("/", 1)[-1]
    _write_text(_join(error_dir, name + ".error.txt"), reason + "\n")
    return _move(f.path, error_dir)


def _join(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name


def _move(path: str, directory: str) -> str:
    name = path.rsplit("/", 1)[-1]
    target = _join(directory, name)
    if is_s3(path) or is_s3(directory):
        fs = opening.store().access.filesystem()
        src, dst = _fs_path(path), _fs_path(target)
        from pyarrow import fs as pafs

        if fs.get_file_info(src).type == pafs.FileType.NotFound:
            return target  # moved before a crash (or by someone else): nothing to do
        fs.copy_file(src, dst)
        fs.delete_file(src)
        return target
    Path(directory).mkdir(parents=True, exist_ok=True)
    try:
        os.replace(path, target)
    except FileNotFoundError:
        pass  # moved before a crash
    return target


def _remove(path: str) -> None:
    if is_s3(path):
        from pyarrow import fs as pafs

        fs = opening.store().access.filesystem()
        if fs.get_file_info(_fs_path(path)).type != pafs.FileType.NotFound:
            fs.delete_file(_fs_path(path))
        return
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _write_text(path: str, text: str) -> None:
    if is_s3(path):
        with opening.store().access.filesystem().open_output_stream(_fs_path(path), compression=None) as out:
            out.write(text.encode())
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)


def _fs_path(uri: str) -> str:
    bucket, key = split_uri(uri)
    return f"{bucket}/{key}"
