"""The one Spark session factory, with explicit arguments.

Under ``spark-submit`` (``./spark-submit.sh``) the master, packages and ``conf/`` settings
are already in the launch configuration and ``getOrCreate`` picks them up; started from
Python (``kappa-ingest ingest``, tests, notebooks) this adds what the job needs itself.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from py4j.protocol import Py4JJavaError
from pyspark import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from kappa_ingest.errors import UsageError
from kappa_ingest.paths import cache_dir, conf_dir
from kappa_ingest.spark import class_archive

SPARK_VERSION = "4.0.0"
KAFKA_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}"
DELTA_PACKAGE = "io.delta:delta-spark_2.13:4.0.0"
PACKAGES = (KAFKA_PACKAGE, DELTA_PACKAGE)


# The driver JVM with C1 only: its optimising compiler (C2) spends the first seconds of a run
# compiling on cores the run needs. Measured on 1M rows (2 cores): start-up + set-up
# 9.7 s -> 5.8-6.8 s, the same sending stage (6.2-6.5 s), JVM CPU in it 2.0 -> 3.6 s. The
# extra CPU grows with the input, so only inputs under QUICK_JIT_BYTES get it. Executors
# started for the session get it by the same rule: two local-cluster executors sending
# 20,000 rows (one killed and replaced) spent 14.6 CPU-s instead of 26.6 (the line path's
# rows never pass through an executor JVM; Spark's own Kafka sink's do). An ordered
# replay's do: C2 cut the JVM's CPU a row while it sent (1.55 µs against 2.62) but not its
# time to exit (23.8 s against 22.7, 1M rows, bench-results/20261128T091829Z).
QUICK_JIT = "-XX:TieredStopAtLevel=1"
QUICK_JIT_BYTES = 1 << 30

# Arrow's Java vectors check each index written against their buffers (a reference count
# read and two compares a value). The rows handed to Python after a shuffle (an ordered
# replay's) are written by Spark's ArrowWriter at indexes it takes from the vectors' own
# counts; unchecked, the JVM's CPU a row while an ordered replay sent went 2.62 -> 1.95 µs
# (bench-results/20261128T091248Z, 20261128T092145Z). spark-submit.sh sets it too.
ARROW_UNCHECKED = "-Darrow.enable_unsafe_memory_access=true"


def quick_jit(input_bytes: int) -> bool:
    """Whether the driver and executor JVMs get the quick compiler only: by the input's size, unless
    KAPPA_INGEST_QUICK_JIT=1 or 0 says (``make bench`` measures both on the same input)."""
    forced = os.environ.get("KAPPA_INGEST_QUICK_JIT")
    return forced == "1" if forced in ("0", "1") else input_bytes < QUICK_JIT_BYTES


def launched_by_spark_submit() -> bool:
    """True when a driver JVM was started by spark-submit before Python ran."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    app_name: str,
    master: str | None = None,
    extra_conf: dict[str, str] | None = None,
    quick_jit: bool = False,
    start_up_aids: bool = True,
) -> SparkSession:
    """A session for the job. ``master`` is used only when Python starts the JVM itself
    (default ``local[*]``); ``extra_conf`` wins over ``conf/`` defaults; ``quick_jit``
    starts the driver and executor JVMs with the quick compiler only (see ``QUICK_JIT``); without
    ``start_up_aids`` (the benchmark's baselines, as users would run them) neither the class
    archive, the preloading worker daemon nor Arrow's unchecked writes are used."""
    builder = SparkSession.builder.appName(app_name)
    if not launched_by_spark_submit():
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        log4j = f"-Dlog4j2.configurationFile=file:{conf_dir() / 'log4j2-spark.properties'}"
        archive = class_archive.options() if start_up_aids else ""
        arrow = ARROW_UNCHECKED if start_up_aids else ""
        driver_java = f"{log4j} {arrow} {archive} {QUICK_JIT if quick_jit else ''}".strip()
        from kappa_ingest.kafka.interceptor import jar_path

        resolved = resolved_package_jars()
        conf = {
            **_defaults_file(),
            "spark.jars": ",".join([str(jar_path()), *resolved]),
            **(
                {}
                if resolved
                else {
                    "spark.jars.packages": ",".join(PACKAGES),
                    "spark.jars.ivySettings": str(conf_dir() / "ivysettings.xml"),
                }
            ),
            "spark.driver.extraJavaOptions": driver_java,
            "spark.executor.extraJavaOptions": f"{log4j} {arrow} {QUICK_JIT if quick_jit else ''}".strip(),
        }
        master = master or "local[*]"
        if start_up_aids and master.startswith("local"):  # workers run this venv's Python, with the package
            conf["spark.python.daemon.module"] = "kappa_ingest.spark.worker_daemon"
        if master.startswith("local"):
            # Shuffle files (an ordered replay's raw lines) stay on this machine: compressing
            # them costs CPU and saves no network (measured: 0.6 s of a 5 s map stage, 1M rows).
            conf.setdefault("spark.shuffle.compress", "false")
        builder = builder.master(master)
        for k, v in conf.items():
            builder = builder.config(k, v)
    for k, v in (extra_conf or {}).items():
        builder = builder.config(k, v)
    # Keys only: a value may be a secret (an S3 key), and the line reaches summary.json.
    keys = ", ".join(extra_conf or {})
    refused = f"Spark refused to start{f' with the settings {keys}' if keys else ''}"
    try:
        if not launched_by_spark_submit():
            _quiet_gateway(builder)
        spark = builder.getOrCreate()
    except Py4JJavaError as e:
        java = e.java_exception
        cause = str(java).strip().splitlines()[0] if java is not None else ""
        if not cause.startswith(_SETTING_REFUSALS):  # the environment's fault (a port, a disk): not usage
            raise
        raise UsageError(f"{refused}: {cause}") from e
    except PySparkRuntimeError as e:  # spark-submit's own checks of its arguments
        if e.getErrorClass() != "JAVA_GATEWAY_EXITED":
            raise
        raise UsageError(f"{refused}: its JVM exited at once (Spark's reason is printed above)") from e
    spark.sparkContext.setLogLevel("WARN")
    return spark


# Lines the JVM and Spark print at every start that say nothing about the run: the JVM's
# note of the vector API module Spark adds, and the shell's hint about log levels (the
# gateway is started as "pyspark-shell"). Anything else on the JVM's stderr is passed on.
_START_UP_NOISE = (b"WARNING: Using incubator modules: ", b'Setting default log level to "',
                   b"To adjust logging level use sc.setLogLevel(")  # fmt: skip


def _quiet_gateway(builder: SparkSession.Builder) -> None:
    """Start the driver JVM (as ``getOrCreate`` would, with the builder's settings) with its
    stderr read by a thread that drops the start-up noise and passes the rest on."""
    import threading

    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # a session's JVM is running (a notebook's second session)
        return
    conf = SparkConf()
    for k, v in builder._options.items():
        conf.set(k, v)
    # Read from before the JVM starts: one that exits at once has said why by then.
    read_end, write_end = os.pipe()

    def relay() -> None:
        out = sys.stderr.buffer
        with os.fdopen(read_end, "rb") as stream:
            for line in iter(stream.readline, b""):
                if not line.startswith(_START_UP_NOISE):
                    out.write(line)
                    out.flush()

    relaying = threading.Thread(target=relay, name="jvm-stderr", daemon=True)
    relaying.start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})
    except BaseException:
        os.close(write_end)
        relaying.join(10)  # the JVM's own reason on the terminal before ours
        raise
    os.close(write_end)  # the JVM holds its own copy
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm


# What the context throws for a setting it cannot take (a size, a number, a master URL).
_SETTING_REFUSALS = (
    "java.lang.IllegalArgumentException",
    "java.lang.NumberFormatException",
    "org.apache.spark.SparkIllegalArgumentException",
    "org.apache.spark.SparkException: Could not parse Master URL",
)


def stop_session(spark: SparkSession, timeout_s: float = 10.0) -> None:
    """Stop the session and, when this process started the JVM, the JVM too, waiting for it.

    Left to itself the JVM notices only after Python has exited, and winds down for half a
    second more with nobody waiting for it but a pipe. Unusable for more Spark afterwards:
    for the command line's end, not for a notebook.
    """
    import subprocess

    sc = spark.sparkContext
    # local-cluster executors work in SPARK_HOME/work/<app> (the pip package's own directory,
    # which LocalSparkCluster gives no option to move): runs piled gigabytes up in the venv.
    scratch = _local_cluster_scratch(sc)
    # pyspark's stop() shuts its accumulator server down and waits for the server's 0.5 s
    # poll (0.7 s measured after a run); the server's thread is a daemon that ends with the process.
    accumulators = getattr(sc, "_accumulatorServer", None)
    sc._accumulatorServer = None  # type: ignore[assignment]
    spark.stop()
    if accumulators is not None:
        accumulators.server_shutdown = True
        # The JVM's end of its connection closes as the JVM exits below; the handler's
        # EOFError then is expected, not worth a traceback on the user's terminal.
        accumulators.handle_error = lambda request, client_address: None
    if scratch is not None:
        _remove_scratch(*scratch)
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)  # set only where pyspark launched the JVM itself
    if gateway is None or proc is None:
        return
    gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None  # type: ignore[assignment]
    if proc.stdin is not None:
        proc.stdin.close()  # the gateway JVM exits when its stdin closes
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _local_cluster_scratch(sc: SparkContext) -> tuple[Path, str] | None:
    """The application's work directory, and what its own executors' launch commands say.

    The directory is not the application's alone: an application id is its master's start
    time in seconds and a counter, and every local-cluster starts its own master, so two
    applications started in the same second (two runs, or two halves of a test suite) share
    ``app-<time>-0000``. Each executor's own subdirectory is its alone (the worker refuses to
    start an executor in one that exists), and it is the executor's working directory, where
    its Python workers import from: removing another application's took its imports away in
    the middle of its run (``FileNotFoundError`` at the next import). Which are ours, the
    worker wrote at the top of each one's ``stderr``: the command that launched it, with our
    driver's address, unique on this host while we run. (Spark's list of our executors
    misses one launched but not yet registered when we stop.)
    """
    if not (sc.master or "").startswith("local-cluster"):
        return None
    import pyspark

    home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    conf = sc.getConf()
    driver = f'CoarseGrainedScheduler@{conf.get("spark.driver.host")}:{conf.get("spark.driver.port")}"'
    return home / "work" / sc.applicationId, driver


def _remove_scratch(work: Path, driver: str) -> None:
    """Remove the directories of the executors launched for ``driver``, then the
    application's directory if no other application's executors are in it."""
    import shutil

    for executor in work.glob("*/stderr"):
        try:
            with open(executor, "rb") as f:
                launched = f.read(1 << 16).decode(errors="replace")
        except OSError:  # a same-named application's, removed by its own stop meanwhile
            continue
        if driver in launched:
            shutil.rmtree(executor.parent, ignore_errors=True)
    try:
        work.rmdir()
    except OSError:  # not empty: a same-named application's, still running or left by a killed one
        pass


def _resolved_list() -> Path:
    digest = hashlib.sha256(",".join(PACKAGES).encode()).hexdigest()[:12]
    return cache_dir() / f"spark-package-jars-{digest}.txt"


def resolved_package_jars() -> list[str]:
    """The local jars ``spark.jars.packages`` resolved to last time (see ``remember_package_jars``).

    Passing them as ``spark.jars`` skips the resolver, its network round trips and its
    console report; empty when unknown or when a jar has left the ivy cache.
    """
    listing = _resolved_list()
    if not listing.exists():
        return []
    jars = [line for line in listing.read_text().splitlines() if line]
    if not (jars and all(Path(j).exists() for j in jars)):
        return []
    # Most of what the packages pull in, Spark ships itself, the same version (Hadoop's
    # client, 50 MB of it; lz4, snappy, slf4j): given again, each run copied it into its
    # files and each executor fetched it from the driver. The rest is the packages' own.
    import pyspark

    shipped = {p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in jars if Path(j).name.partition("_")[2] not in shipped]


def remember_package_jars(spark: SparkSession) -> list[str]:
    """Record the jars a session started with ``spark.jars.packages`` was given."""
    # pyspark's launcher lists the resolved jars here (spark.jars keeps only explicit ones).
    listed = spark.sparkContext.getConf().get("spark.repl.local.jars", "").split(",")
    jars = [j.removeprefix("file://") for j in listed if j and "kappa-ingest-interceptor" not in j]
    if jars:
        _resolved_list().write_text("\n".join(jars) + "\n")
    return jars


def _defaults_file() -> dict[str, str]:
    """``conf/spark-defaults.conf`` as a dict (spark-submit reads it with --properties-file)."""
    path = conf_dir() / "spark-defaults.conf"
    out: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition(" ")
                out[key] = value.strip()
    return out
