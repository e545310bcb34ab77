"""Spark as kappa-ingest runs it: sessions, clusters, and what Spark says of a run.

- ``session``        the one session factory (packages, Python workers, start-up aids)
- ``class_archive``  the driver JVM's class archive (made by ``make setup``)
- ``warmup``         Python workers started while the input is planned and Kafka set up
- ``worker_daemon``  Spark's Python daemon with kappa-ingest imported before the fork
- ``cluster``        a standalone master and workers, started and stopped by PID
- ``pack``           the venv packed for a cluster's executors
- ``metrics``        Spark's task and stage records, from its status store
- ``failures``       a failed Spark job's cause, in one line and an exit code
"""
