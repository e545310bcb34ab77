"""Object storage: inputs read from S3 (or an S3-compatible store), the metrics directory
kept there, and a local S3 server.

- ``access``    the store's settings (endpoint, region; keys from the standard AWS chain),
                the filesystem built from them where it is used, an object's URI, and the
                store's errors as the project's (exit 3 for what the input names, exit 4
                for the store);
- ``objects``   an object's identity (size, time, ETag: one HEAD) and its bytes, refused
                when it is no longer the planned one;
- ``listing``   what an input names (a key, a prefix, a glob), as objects;
- ``signed_list`` ListObjectsV2 asked and signed here, for the ETags pyarrow's listing lacks;
- ``directory`` a directory reports are written to, local or a store's prefix (files,
                and the Delta tables' URIs with delta-rs's settings);
- ``server``    S3Proxy, started and stopped by PID (``kappa-ingest s3 start|stop``).
"""
