"""Object storage: inputs read from S3 (or an S3-compatible store) and a local S3 server.

- ``location``  what an ``s3://bucket/key`` input names (a key, a prefix, a glob), parsed;
- ``access``    the store's settings (endpoint, region; keys from the standard AWS chain),
                the filesystem built from them where it is used, and its errors as the
                project's (exit 3 for what the input names, exit 4 for the store);
- ``listing``   an input's objects, with the size and ETag that are their identity;
- ``server``    S3Proxy, started and stopped by PID (``kappa-ingest s3 start|stop``).
"""
