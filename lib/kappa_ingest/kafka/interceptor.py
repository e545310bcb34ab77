"""The producer interceptor that lets Spark's Kafka sink carry record timestamps.

Spark's sink has no timestamp column, so :func:`kappa_ingest.source.records.kafka_batch` adds each
record's timestamp as the header ``__kappa_ts`` and ``java/kappa/ingest/TimestampFromHeader``
moves it into the record. This module compiles that class once (javac, against the Kafka
client jar already in the cache) into a jar that the session and ``spark-submit.sh`` ship.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from kappa_ingest.errors import UsageError
from kappa_ingest.paths import cache_dir

CLASS_NAME = "kappa.ingest.TimestampFromHeader"
SOURCE = Path(__file__).parent / "java" / "kappa" / "ingest" / "TimestampFromHeader.java"


def jar_path() -> Path:
    """The interceptor's jar, built on first use."""
    from kappa_ingest.kafka.broker import jars_dir

    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    jar = cache_dir() / f"kappa-ingest-interceptor-{digest}.jar"
    if jar.exists():
        return jar
    javac = shutil.which("javac")
    if javac is None:
        raise UsageError("javac (a JDK 17) is needed to build the Spark sink's timestamp interceptor; install a JDK")
    clients = sorted(jars_dir().glob("kafka-clients-*.jar"))
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [javac, "--release", "17", "-cp", str(clients[0]), "-d", out, str(SOURCE)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise UsageError(f"building the timestamp interceptor failed: {done.stderr.strip()[-300:]}")
        tmp = jar.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w") as z:
            for f in Path(out).rglob("*.class"):
                z.write(f, f.relative_to(out).as_posix())
        tmp.replace(jar)
    return jar


if __name__ == "__main__":
    print(jar_path())
