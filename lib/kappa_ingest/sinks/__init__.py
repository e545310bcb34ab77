"""The three ways to produce: ``confluent`` and ``kafka-python`` (one producer per
partition, through :mod:`.partition_runner`) and ``spark`` (Spark's own Kafka sink)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from kappa_ingest import kafka_settings
from kappa_ingest.csv_source import Source
from kappa_ingest.records import wall_clock_ms
from kappa_ingest.sinks.partition_runner import TaskStats, run_partitions

# How each sink counts a row as sent; written into the run report.
COUNTED_BY = {
    "confluent": "librdkafka delivery reports (failures) and flush() == 0, collected in an action",
    "kafka-python": "send futures' errbacks and flush(), collected in an action",
    "spark": "rows handed to Spark's Kafka writer by successful tasks (accumulator by task id)",
}


def send(
    sink: str,
    source: Source,
    topic: str,
    settings: dict[str, str],
    bootstrap_servers: str,
    rate_per_task: float | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> list[TaskStats]:
    """Send the source's rows to ``topic`` with the named sink; per-task statistics of
    successful tasks."""
    if sink == "spark":
        from kappa_ingest.sinks import spark_sink

        options = kafka_settings.for_spark(settings, bootstrap_servers)
        return spark_sink.send(source.df, source.spec, source.parser, topic, options, rate_per_task, clock)
    if sink == "confluent":
        from kappa_ingest.sinks.confluent_sink import make_producer

        make = partial(make_producer, kafka_settings.for_confluent(settings, bootstrap_servers), topic)
    else:
        from kappa_ingest.sinks.kafka_python_sink import KafkaPythonPartitionProducer

        make = partial(
            KafkaPythonPartitionProducer, kafka_settings.for_kafka_python(settings, bootstrap_servers), topic
        )
    return run_partitions(source.df, source.spec, source.parser, make, rate_per_task, clock)
