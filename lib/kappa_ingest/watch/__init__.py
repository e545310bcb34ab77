"""Watching a landing directory: files streamed into a topic seconds after they land.

- ``landing``  which files of a directory, glob or ``s3://`` prefix are ready to send
                (writers' scratch names passed over, each file still for ``--min-file-age``);
- ``discovery``  when to look again: inotify on a local directory, a full listing every period;
- ``exposition`` the watch's numbers for Prometheus (``--metrics-port``).
"""
