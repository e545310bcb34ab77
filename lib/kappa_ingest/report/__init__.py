"""What a run did, and how fast: built at its end, read without Spark afterwards.

- ``run``          the run report (contract §3): built, checked, printed, summary.json
- ``phases``       where the command's time went (start-up to recording), and the run's clock
- ``broker_rate``  the broker-side ingest rate curve, sampled while the run sends
- ``progress``     the line a run prints while it sends
- ``store``        the Delta tables of runs, tasks, stages and rates
- ``text``         ``kappa-ingest report --last N`` / ``--compare A B``
- ``html``, ``plots``  one run's page and its figures (shared with the notebook)
"""
