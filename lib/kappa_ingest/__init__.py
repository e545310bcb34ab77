"""kappa-ingest: CSV files into a Kafka topic with Apache Spark, as fast as the hardware
allows, every row exactly once, and a report of exactly how fast it went.

The pipeline is ``ingest.run``: one run with the resources someone holds
(``pipeline.resources.RunResources``: Kafka, the topic's lock, Spark) and the work
``delivery.work.prepare`` chose. ``kappa-ingest ingest`` runs it once (``cli.run_ingest``),
``kappa-ingest watch`` once per batch of landed files (``watch.loop``), and
``ingest.ingest`` in a session the caller has (notebooks, tests). Read ``ingest.py``
first. Its steps, each living in the folder named:

1. ``config``            one frozen IngestConfig from ``conf/ingest.yaml`` + the command line
2. ``delivery.lock``     one run at a time per topic; ``delivery.resume`` / ``.incremental``:
                         what a resumed or scheduled run still has to send
3. ``source.dataframe``  the inputs as a DataFrame in units the ledger records; ``quality``:
                         a Great Expectations suite on every row before sending
4. ``sinks.send``        one producer per partition, one transaction per unit with its ledger
                         entry; each batch parsed (``source.parsing``) and encoded
                         (``source.records``) on the executors
5. ``delivery.reconcile``  the topic holds what was sent
6. ``report``            Spark's records joined with the producers' counts, checked, printed,
                         stored (summary.json and Delta tables)

``reprocess`` replays a topic's history from the ledger through the same pipeline;
``watch`` streams a landing directory through it, the ledger its only state.

The layers, bottom to top; a module imports only its own folder and lower lines
(``tests/unit/test_layers.py`` holds the package to it):

- ``errors``, ``paths``, ``processes``, ``failpoints``, ``settling``, ``datagen``: what everyone may use
- ``native/``    the C loops (JSON values, the produce loop, read-back, gather) and their loader
- ``kafka/``     settings, credentials, security, the embedded broker, topics;
  ``s3/``        object storage: an input's objects, their bytes, a metrics directory there, the local S3 server
- ``source/``    files to clean rows and quarantined ones, rows to Kafka records
- ``delivery/``  guarantees, ledger, lock, resume, incremental, reconcile
- ``sinks/``     the three ways to produce, the per-partition runner, the writers
- ``spark/``     sessions, clusters, packing, Spark's own metrics, failure causes
- ``report/``    the run report, its views and figures, the Delta store, the rate sampler
- ``quality``, ``config``, ``preflight``, ``reprocess``, ``pipeline/``, ``ingest``, ``setup_jars``: the
  pipelines and what they are configured by
- ``watch/``     a landing directory watched: discovery, the ledger's view, disposal, the loop
- ``bench/``     ``make bench`` and its peers; ``cli`` on top
"""

__version__ = "0.1.0"
