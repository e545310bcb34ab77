"""The run's input files: local files, directories and globs expanded, checked readable.

Light on purpose (no Spark, no Arrow): the command line checks its inputs with it before
the JVM starts.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from urllib.parse import urlparse

from kappa_ingest.errors import InputError

SUFFIXES = (".csv", ".csv.gz")


def resolve_inputs(inputs: tuple[str, ...]) -> tuple[list[str], int]:
    """Expand local files, directories and globs to the ``.csv``/``.csv.gz`` files they name.

    URIs with another scheme (``hdfs://``, ``s3a://``) are passed to Spark as given.
    Returns the paths and the local bytes found. InputError names a missing input.
    """
    paths: list[str] = []
    total = 0
    for item in inputs:
        scheme = urlparse(item).scheme
        if scheme not in ("", "file"):
            paths.append(item)
            continue
        local = item.removeprefix("file://")
        if glob.has_magic(local):
            matches = sorted(p for p in glob.glob(local) if os.path.isfile(p))
            if not matches:
                raise InputError(f"input {item}: no file matches; check the --input pattern")
        elif os.path.isdir(local):
            matches = sorted(str(p) for p in Path(local).iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
            if not matches:
                raise InputError(f"input {item}: directory has no .csv or .csv.gz files")
        elif os.path.isfile(local):
            matches = [local]
        else:
            raise InputError(f"input {item}: no such file or directory; check --input")
        for m in matches:
            if not os.access(m, os.R_OK):
                raise InputError(f"input {m}: not readable (permissions); fix its mode or run as its owner")
            total += os.path.getsize(m)
            paths.append(os.path.abspath(m))
    return paths, total
