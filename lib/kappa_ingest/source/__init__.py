"""The input side: CSV files into Arrow batches of clean rows and quarantined ones, and
clean rows into Kafka records. Knows nothing of delivery or of which sink sends.

- ``inputs``       the input files, refused before Spark when they are not CSV text
- ``splits``       the units the ledger records (a split of a file, or a part of it)
- ``dataframe``    the inputs as a DataFrame: raw lines (the line path) or Spark-parsed rows
- ``split_reader`` a task reading its splits' lines itself, as Hadoop's LineRecordReader cuts them
- ``transcode``    Latin-1, Windows-1252 and UTF-16 lines into UTF-8, a batch at a time
- ``line_shuffle`` more partitions than splits, or event-time order: lines moved as offsets
- ``line_places``  an ordered replay's lines moved as their places: a 16-byte mark each
- ``task_input``   a task's batches cut by split, parsed unit by unit
- ``parsing``      per Arrow batch: clean rows and quarantined rows, with reasons
- ``typed``        ``--schema``, event time and null tokens, by Arrow's conversion
- ``records``      clean rows into Kafka records (JSON value, key, timestamp, headers): pure
- ``record_size``  records over the topic's limit quarantined
- ``quarantine``   the rejected rows, gathered beside the report
- ``columns``      the internal column names the steps hand each other
"""
