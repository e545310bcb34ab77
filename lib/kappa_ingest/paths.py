"""Where the project's files live: its ``conf/`` directory and the download cache."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The checkout (``lib/kappa_ingest/`` is two levels below it); KAPPA_INGEST_HOME overrides."""
    env = os.environ.get("KAPPA_INGEST_HOME")
    return Path(env) if env else Path(__file__).resolve().parents[2]


def conf_dir() -> Path:
    return project_root() / "conf"


def cache_dir() -> Path:
    """Downloaded jars (the broker's); KAPPA_INGEST_CACHE overrides ``~/.cache/kappa-ingest``."""
    env = os.environ.get("KAPPA_INGEST_CACHE")
    path = Path(env) if env else Path.home() / ".cache" / "kappa-ingest"
    path.mkdir(parents=True, exist_ok=True)
    return path
