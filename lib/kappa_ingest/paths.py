"""Where the project's files live: its ``conf/`` directory, the download cache and the
JVMs' class archives in it."""

from __future__ import annotations

import hashlib
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


def class_archive_at(name: str, java: Path, jars: Path) -> Path:
    """Where the class archive ``name`` of a JVM (``java``, resolved) running the jars in
    ``jars`` lives in the cache: keyed by the JDK and each jar's place, size and time, as the
    JVM checks them. It refuses an archive for a jar that differs in any of them, silently;
    keyed by names and sizes alone, two checkouts' venvs shared one key, and the one built
    last made the other's drivers start without it (seen: every run here after a CI
    rehearsal in another directory, ~15,000 classes loaded from the jars)."""
    listing = sorted(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in jars.glob("*.jar"))
    key = "\n".join([str(java), str(java.stat().st_mtime_ns), *listing])
    return cache_dir() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.jsa"
