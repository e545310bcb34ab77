"""``make bench``: kappa-ingest side by side with its peers on the same input and broker.

- ``contestants``  how each contestant is run (a command) and read (its own timing)
- ``monitor``      CPU seconds and peak memory of a contestant's whole process tree
- ``classic_script``, ``plain_spark``  the two baselines, as their authors would write them
- ``runner``       fresh topic per run, repeats, medians, ratios; table, JSON, Markdown, PNG
"""
