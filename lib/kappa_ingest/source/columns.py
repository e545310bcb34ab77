"""Names of the columns the source adds beside the CSV's own (the double underscore keeps
them apart from any header)."""

PREFIX = "__kappa"  # every column below starts with it
FILE_COL = "__kappa_file"  # the row's source file (path or URI)
EVENT_TS_COL = "__kappa_event_ts"  # parsed --event-time-column
REJECT_COL = "__kappa_reject"  # why Spark's CSV reader marked the row, or null
CORRUPT_COL = "__kappa_corrupt"  # a malformed row's raw text (Spark's corrupt-record column)
LINE_COL = "__kappa_line"  # a raw line (the fast path reads lines)
BLOCK_COL = "__kappa_block"  # the byte offset of the row's split: 0 for a file's first split
BLOCK_LEN_COL = "__kappa_block_len"  # the length of the line's split (its ledger unit)
ROW_HASH_COL = "__kappa_row_hash"  # a row's hash over its own file's columns, in that file's order (a shuffle's key)
FIRST_COL = "__kappa_first"  # a shuffled line is its file's first (a header, or data with a BOM)
LINE_NO_COL = "__kappa_line_no"  # a shuffled line's number in its split
KEY_COL = "__kappa_key"  # a shuffled line's --key-column text (the parts of an ordered replay planned by_lines)
PART_COL = "__kappa_part"  # a shuffled line's part, as a value Spark's hash partitioning puts there (by_keys)
EVENT_US_COL = "__kappa_event_us"  # a shuffled line's event time, UTC microseconds (an ordered replay's sort)
LINE_AT_COL = "__kappa_line_at"  # a line moved without its text: its byte offset in its file
LINE_LEN_COL = "__kappa_line_len"  # ... and its length in bytes (its terminator not counted)
# An ordered replay's line read back from its place alone: its split's number in the run, its
# byte offset and length, in 16 bytes that sort as split, then offset (source.line_shuffle).
MARK_COL = "__kappa_mark"
