"""kappa-ingest: CSV files into a Kafka topic with Apache Spark, as fast as the hardware
allows, every row exactly once, and a report of exactly how fast it went.

The pipeline (``ingest.ingest`` runs it; ``jobs/ingest_csv.py`` and ``kappa-ingest ingest``
call that):

1. ``config``        one frozen IngestConfig from ``conf/ingest.yaml`` + the command line
2. ``lock``          one run at a time per topic: a claim in the ledger topic (exit 6)
   ``resume``        with ``--resume``: the run continued, its files checked, its
                     transactions fenced, the ledger read (before Spark starts);
   ``incremental``   with ``--incremental``: the files (and units) the ledger lacks;
   ``reprocess``     ``kappa-ingest reprocess``: the history a topic was given, from the ledger
3. ``csv_source``    the inputs as a DataFrame, in units the ledger records (``splits``):
                     raw lines (fast path) or Spark-parsed rows, each file by its own header
   ``split_reader``  on the fast path over local files: each task handed its splits reads
                     their lines itself, as Hadoop's LineRecordReader cuts them
   ``quality``       with ``--expectations``: a Great Expectations suite on every parsed
                     row before sending (fail, quarantine rows, or warn)
4. ``parsing``       per Arrow batch, on the executors: clean rows and quarantined rows
5. ``records``       clean rows → Kafka records (JSON value, key, timestamp, headers); pure
6. ``sinks``         one producer per partition (``confluent``, ``kafka-python``), one
                     transaction per task with its ``ledger`` entries (``delivery``), or
                     Spark's own Kafka sink (``spark``); each counts what Kafka acknowledged
7. ``spark_metrics`` Spark's own task and stage records, from its status REST API
8. ``reconcile``     the topic holds what was sent: offsets and commit markers, or a
                     read_committed read-back of the run's own records
9. ``report``        joined, checked (a replay: both topics compared), printed, written to ``<metrics-dir>/runs/<run_id>/summary.json``
                     and the Delta tables (``metrics_store``)
10. ``quarantine``   rejected rows with file and reason, beside the report, and with
                     ``--dead-letter-topic`` in a topic too (``dead_letter``, sent in step 6)

Around it: ``inputs`` (the input files, refused before Spark when they are not CSV text),
``record_size`` (records over the topic's limit quarantined), ``native`` (the C loops that
encode JSON values and feed librdkafka a batch per call; shipped built to executors) and
``task_notes`` (what executors warn of, into the report), ``warmup`` (Python workers
started while Kafka is set up), ``local_kafka`` (the embedded KRaft broker; secured by
``kafka_security``), ``spark_cluster`` and ``pack`` (a standalone cluster and the venv for
its executors), ``topics`` (driver-side admin and ACL checks), ``kafka_settings`` (Kafka's
Java setting names, translated per client) and ``credentials`` (``${NAME}``/``@PATH``
secrets, masked in all output), ``failures`` (a failed Spark job's cause, in one line),
``datagen`` (test data), ``spark_session`` (the one session factory) and ``cli`` (exit codes).

Reading runs afterwards, without Spark: ``metrics_store`` (the Delta tables), ``report_text``
(``kappa-ingest report --last N`` / ``--compare A B``), ``report_html`` (one run's page) and
``plots`` (its figures, shared with ``notebooks/ingest_rates.ipynb``).
"""

__version__ = "0.1.0"
