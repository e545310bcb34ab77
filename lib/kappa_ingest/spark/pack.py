"""``kappa-ingest pack``: the venv as an archive for executors (``spark-submit --archives``).

venv-pack refuses a venv with an editable install, which is how ``make setup`` installs
kappa-ingest, and is no longer maintained. This packs the venv's interpreter links and
third-party packages the executors use: kappa-ingest itself (with its C loops built)
reaches executors in the zip ``spark-submit.sh`` ships, Spark's own jars come with each
worker's Spark, and what only the driver uses stays out (``DRIVER_ONLY``).
The interpreter is a link to the Python the venv was made from, so executors need that
Python (the same version, at the same path) installed, as with venv-pack.
"""

from __future__ import annotations

import fnmatch
import tarfile
from pathlib import Path

from kappa_ingest.errors import UsageError

SITE = "lib/python3*/site-packages/"
# What the driver alone uses: the metrics store (deltalake), figures (matplotlib), Great
# Expectations' validation (GX, and scipy and altair for it; the quality gate's row checks
# on executors are Arrow predicates), notebooks and installing. Executors run the pyspark
# worker and kappa-ingest's parsing, encoding and producers: pyarrow, polars, numpy, orjson,
# the Kafka clients, and pandas, which pyspark's worker may import.
DRIVER_ONLY = ("deltalake", "matplotlib", "PIL", "pillow.libs", "fontTools", "great_expectations", "scipy",
               "scipy.libs", "altair", "IPython", "ipykernel", "jedi", "parso", "debugpy", "jupyter_client",
               "jupyter_core", "nbclient", "nbformat", "zmq", "pyzmq.libs", "pip", "setuptools", "watchdog",
               "prometheus_client")  # fmt: skip
# Paths (relative to the venv) executors never need.
EXCLUDE = (
    "*/__pycache__", "*.pyc",
    SITE + "pyspark/jars",  # the workers' Spark brings its own
    SITE + "pyspark/work",  # local-cluster executors' scratch space
    SITE + "__editable__*",  # kappa-ingest itself travels in the --py-files zip
    *(SITE + name for name in DRIVER_ONLY),
)  # fmt: skip


def pack(venv: Path | str, out: Path | str, compress_level: int = 1) -> Path:
    """Write ``venv`` as ``out`` (``.tar``, ``.tar.gz`` or ``.tgz``), paths relative to the
    venv so that ``--archives out#venv`` gives executors ``./venv/bin/python``."""
    venv, out = Path(venv).resolve(), Path(out)
    if not (venv / "pyvenv.cfg").exists():
        raise UsageError(f"--venv {venv}: not a virtual environment (no pyvenv.cfg)")
    mode = {".tar": "w", ".gz": "w:gz", ".tgz": "w:gz"}.get(out.suffix)
    if mode is None:
        raise UsageError(f"--out {out}: give a .tar, .tar.gz or .tgz file")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        rel = info.name.removeprefix("./")
        return None if any(fnmatch.fnmatch(rel, p) for p in EXCLUDE) else info

    # Level 1 (the default here): ~4x faster than gzip's default, ~10% bigger; 0 stores only.
    kwargs = {"compresslevel": compress_level} if mode == "w:gz" else {}
    with tarfile.open(tmp, mode, **kwargs) as tar:  # type: ignore[call-overload]
        for child in sorted(venv.iterdir()):
            tar.add(child, arcname=child.name, filter=keep)
    tmp.replace(out)
    return out
