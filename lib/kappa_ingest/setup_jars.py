"""Fetch and build, once, what a run needs: ``python -m kappa_ingest.setup_jars`` (``make setup``).

The broker's jars and class archive, the local S3 server's jar, the C record loops and the Spark driver's class archive go to the kappa-ingest cache; Spark's
packages (Kafka sink, Delta) to Spark's ivy cache, by starting and stopping one local session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kappa_ingest import native
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka.interceptor import jar_path
from kappa_ingest.paths import conf_dir
from kappa_ingest.s3 import server as s3_server
from kappa_ingest.spark import class_archive
from kappa_ingest.spark.session import PACKAGES, build_session, remember_package_jars, resolved_package_jars


def main() -> None:
    print(f"Kafka broker jars: {local_kafka.jars_dir()}")
    broker_archive = local_kafka.class_archive()
    if broker_archive is not None and not broker_archive.exists():
        try:  # a start-up saving: brokers start without it
            with tempfile.TemporaryDirectory(prefix="kappa-broker-cds-") as tmp:
                broker_archive = local_kafka.train_class_archive(Path(tmp))
        except Exception as e:  # noqa: BLE001 - what follows does not need it
            print(f"Kafka broker class archive: not made ({type(e).__name__}: {e})")
            broker_archive = None
    print(f"Kafka broker class archive: {broker_archive or 'not made (no java, or the JVM wrote none)'}")
    print(f"Spark sink timestamp interceptor: {jar_path()}")
    print(f"S3Proxy (the local S3 server): {s3_server.jar_path()}")
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
        subprocess.run([sys.executable, "-m", "kappa_ingest.setup_jars", "--class-archive"], check=False)
    else:
        print(f"Spark driver class archive: {archive}")


def _train(spark) -> None:  # type: ignore[no-untyped-def]
    """What a run's driver does, without Kafka: dry runs over both read paths."""
    from kappa_ingest import config, datagen
    from kappa_ingest.ingest import ingest

    with tempfile.TemporaryDirectory(prefix="kappa-cds-") as tmp:
        data = datagen.generate("wide30", 2000, Path(tmp) / "train.csv")
        for extra in ({}, {"partitions": 4}, {"multiline": True}):
            cfg = config.validate({"inputs": [str(data)], "topic": "train", "dry_run": True,
                                   "metrics_dir": str(Path(tmp) / "metrics"), **extra})  # fmt: skip
            ingest(cfg, spark, echo=False)


def build_class_archive(timeout_s: float = 300.0) -> Path | None:
    """Make the archive from a training session; must run in a process whose Spark JVM is
    not started yet (pyspark keeps one JVM per process). The JVM writes the archive as it
    exits, so this waits for it. None where there is no java."""
    target = class_archive.path()
    if target is None:
        return None
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    log4j = f"-Dlog4j2.configurationFile=file:{conf_dir() / 'log4j2-spark.properties'}"
    spark = build_session("kappa-ingest class archive", "local[2]", extra_conf={
        "spark.driver.extraJavaOptions": f"{log4j} -XX:ArchiveClassesAtExit={tmp} {class_archive.QUIET}"})  # fmt: skip
    jvm = spark.sparkContext._gateway.proc  # type: ignore[union-attr]
    try:
        _train(spark)
    finally:
        spark.stop()
        jvm.stdin.close()  # pyspark's gateway JVM exits when its stdin closes, and writes the archive then
        jvm.wait(timeout_s)
    if not tmp.exists():
        return None
    tmp.replace(target)
    return target


if __name__ == "__main__":
    if sys.argv[1:] == ["--class-archive"]:
        made = build_class_archive()
        print(f"Spark driver class archive: {made or 'not made (no java, or the JVM wrote none)'}")
    else:
        main()
