"""The three ways to produce, and :func:`send`, which picks one: ``confluent`` and
``kafka-python`` (one producer per partition, through ``partition_runner``) and ``spark``
(Spark's own Kafka sink, ``spark_kafka``).

- ``partition_runner``  each partition parsed, encoded and handed to its writer
- ``writers``           transactions per unit or per task, or acknowledged sends
- ``producer``          the producer interface the writers drive; ``confluent``, ``kafka_python``
- ``task_units``        which of a task's units to send; ``task_stats`` what the task did
- ``dead_letter``       quarantined rows into ``--dead-letter-topic``
- ``task_notes``        what executors warn of, into the report
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from kappa_ingest.delivery.guarantees import TaskDelivery
from kappa_ingest.kafka import settings as kafka_settings
from kappa_ingest.sinks.partition_runner import SendOutcome, run_partitions
from kappa_ingest.source.dataframe import Source
from kappa_ingest.source.records import wall_clock_ms

# How each sink counts a row as sent; written into the run report.
COUNTED_BY = {
    "confluent": "librdkafka delivery reports (failures) and flush() == 0, collected in an action",
    "kafka-python": "send futures' errbacks and flush(), collected in an action",
    "spark": "rows handed to Spark's Kafka writer by successful tasks (accumulator by task id)",
}


def send(
    sink: str,
    source: Source,
    settings: dict[str, str],
    bootstrap_servers: str,
    delivery: TaskDelivery,
    rate_per_task: float | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> SendOutcome:
    """Send the source's rows to the delivery's topic with the named sink."""
    topic = delivery.topic
    if sink == "spark":
        from kappa_ingest.sinks import spark_kafka as spark_sink

        options = kafka_settings.for_spark(settings, bootstrap_servers, delivery.run_id)
        return spark_sink.send(source.df, source.spec, source.parser, options, delivery, rate_per_task, clock)
    if sink == "confluent":
        from kappa_ingest.sinks.confluent import make_producer

        make = partial(make_producer, kafka_settings.for_confluent(settings, bootstrap_servers), topic)
    else:
        from kappa_ingest.sinks.kafka_python import KafkaPythonPartitionProducer

        make = partial(
            KafkaPythonPartitionProducer, kafka_settings.for_kafka_python(settings, bootstrap_servers), topic
        )
    return run_partitions(source, make, delivery, rate_per_task, clock)
