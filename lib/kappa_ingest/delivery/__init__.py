"""Every row exactly once (or at least once), whoever else writes: the rules, and the
topic-side records they rest on.

- ``guarantees``   delivery modes, transactional ids by unit, fencing, open transactions
- ``ledger``       the compacted topic of delivered units, read and written in transactions
- ``lock``         one run at a time per topic, a claim in the ledger (saves work, guarantees nothing)
- ``resume``       ``--resume``: the run continued, its files checked, its transactions fenced
- ``incremental``  ``--incremental``: the files and units the ledger lacks
- ``reconcile``    the topic holds what was sent: offsets and markers, or a read-back
"""
