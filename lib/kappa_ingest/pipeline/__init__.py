"""The ingest pipeline's steps that join every concern below into one run, each step a
module (:mod:`kappa_ingest.ingest` calls them in order):

- ``sending``      topics, limits and task delivery set up (``set_up``), then the send (``send``)
- ``accounting``   units delivered and missing, the driver's ledger entries
- ``reconciling``  what the topic holds, against what was sent
- ``resources``    a run's Kafka, lock and Spark, with one owner (a watch holds them for all its batches)
- ``kept``         Kafka's answers a long-lived driver keeps from one run to the next
- ``reported``     the run report built from the steps' typed results (the steps write nothing into it)
"""
