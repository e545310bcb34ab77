"""kappa-ingest: CSV files into a Kafka stream with Spark, as fast as the hardware allows."""

from setuptools import find_packages, setup

# The pins of ../shared/stack.md: checked to install and run together.
INSTALL_REQUIRES = [
    "pyspark==4.0.0",
    "delta-spark==4.0.0",  # for reading the metrics store from Spark (notebooks); the job writes it with deltalake
    "deltalake==1.6.6",  # the metrics store, written and read from the driver's Python: no Spark job, no JVM
    "great-expectations[spark]==1.24.1",
    "kafka-python==3.0.12",
    "lz4>=4",  # kafka-python's lz4 codec (the shipped conf/ingest.yaml compresses with lz4)
    "zstandard>=0.22",  # kafka-python's zstd codec
    "crc32c>=2.3",  # kafka-python checksums its record batches in pure Python without it (40% of its CPU)
    "confluent-kafka==2.16.1",
    "orjson>=3.10",
    "pyarrow==26.0.1",
    "polars==2.1.0",
    "pyyaml>=6",
    "matplotlib>=3.8",  # benchmark and report figures
    "psutil>=5.9",  # the benchmark's CPU and memory readings
    "tqdm>=4.60",  # the live progress bar
    "watchdog==7.1.0",  # `watch`: inotify on a landing directory
    "prometheus-client==0.26.0",  # `watch --metrics-port`
]

setup(
    name="kappa-ingest",
    version="0.1.0",
    description="Bulk CSV to Kafka with Apache Spark, measured",
    python_requires=">=3.11",
    package_dir={"": "lib"},
    packages=find_packages("lib"),
    package_data={
        "kappa_ingest.native": ["c/*.c", "c/*.h"],
        "kappa_ingest.kafka": ["java/kappa/ingest/*.java"],
    },  # built at first use
    install_requires=INSTALL_REQUIRES,
    extras_require={
        "test": [
            "chispa==0.12.0",
            "pytest>=9,<10",
            "ruff>=0.8",
            "nbclient>=0.10",
            "nbformat>=5.10",
            "ipykernel>=6.29",
            "playwright==1.65.2",
        ]  # drives Debian's chromium (`make browser` installs it) for the report page's test
    },
    entry_points={"console_scripts": ["kappa-ingest=kappa_ingest.cli:main"]},
)
