"""``make bench``: kappa-ingest side by side with its peers on the same input and broker.

- ``contestants``  how each contestant is run (a command) and read (its own timing)
- ``monitor``      CPU seconds and peak memory of a contestant's whole process tree
- ``classic_script``, ``plain_spark``, ``naive_partitions``  the baselines, as their
  authors would write them (the last is the kafka-python sink's naive form)
- ``runner``       fresh topic per run, repeats, medians, ratios; table, JSON, Markdown, PNG
"""
