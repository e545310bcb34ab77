"""Fetch and build, once, what a run needs: ``python -m kappa_ingest.setup_jars`` (``make setup``).

The broker's jars, the C record loops and the Spark driver's class archive go to the kappa-ingest cache; Spark's
packages (Kafka sink, Delta) to Spark's ivy cache, by starting and stopping one local session.
"""

from __future__ import annotations

import subprocess
import sys

from kappa_ingest import class_archive, local_kafka, native
from kappa_ingest.interceptor import jar_path
from kappa_ingest.spark_session import PACKAGES, build_session, remember_package_jars, resolved_package_jars


def main() -> None:
    print(f"Kafka broker jars: {local_kafka.jars_dir()}")
    print(f"Spark sink timestamp interceptor: {jar_path()}")
    try:
        print(f"C record loops: {native.build()}")
    except native.NativeUnavailable as e:
        print(f"C record loops: not built ({e}); JSON by polars, the confluent sink by its Python API")
    if not resolved_package_jars():
        spark = build_session("kappa-ingest setup", "local[1]")
        remember_package_jars(spark)
        spark.stop()
    print(f"Spark packages ({', '.join(PACKAGES)}): {len(resolved_package_jars())} jars")
    archive = class_archive.path()
    if archive is not None and not archive.exists():
        # A process of its own: pyspark starts one JVM per process, and the archive is made by a fresh one.
        subprocess.run([sys.executable, "-m", "kappa_ingest.class_archive"], check=False)
    else:
        print(f"Spark driver class archive: {archive}")


if __name__ == "__main__":
    main()
