"""kappa-ingest: CSV files into a Kafka topic with Apache Spark, as fast as the hardware
allows, and a report of exactly how fast it went.

The pipeline (``ingest.ingest`` runs it; ``jobs/ingest_csv.py`` and ``kappa-ingest ingest``
call that):

1. ``config``        one frozen IngestConfig from ``conf/ingest.yaml`` + the command line
2. ``csv_source``    the inputs as a DataFrame: raw lines (fast path) or Spark-parsed rows
3. ``parsing``       per Arrow batch, on the executors: clean rows and quarantined rows
4. ``records``       clean rows → Kafka records (JSON value, key, timestamp, headers); pure
5. ``sinks``         one producer per partition (``confluent``, ``kafka-python``) or
                     Spark's own Kafka sink (``spark``); each counts what Kafka acknowledged
6. ``spark_metrics`` Spark's own task and stage records, from its status REST API
7. ``report``        joined, checked (counts reconcile with the broker's offsets), printed,
                     written to ``<metrics-dir>/runs/<run_id>/summary.json``
8. ``quarantine``    rejected rows with file and reason, beside the report

Around it: ``native`` (the C loops that encode JSON values and feed librdkafka a batch
per call), ``warmup`` (Python workers started while Kafka is set up), ``local_kafka`` (the
embedded KRaft broker), ``topics`` (driver-side admin), ``kafka_settings`` (Kafka's Java
setting names, translated per client), ``datagen`` (test data), ``spark_session`` (the
one session factory) and ``cli`` (exit codes).
"""

__version__ = "0.1.0"
