"""The local S3 server the benchmarks read inputs from (``make bench``'s and ``make soak``'s
"from S3" rows): S3Proxy on this machine, its key pair in a credentials file beside it, as a
user's AWS chain finds one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

from kappa_ingest.s3 import server
from kappa_ingest.s3.server import LocalS3

BUCKET = "bench"


def start(state_dir: Path) -> LocalS3:
    return with_credentials(server.start(state_dir))


def with_credentials(store: LocalS3) -> LocalS3:
    """``store``, its key pair written to a credentials file beside it (0600) for ``environment``."""
    credentials = store.state_dir / "credentials"
    credentials.touch(mode=0o600)
    credentials.write_text(
        f"[default]\naws_access_key_id = {server.ACCESS_KEY}\naws_secret_access_key = {store.secret_key()}\n"
    )
    return store


def environment(store: LocalS3) -> dict[str, str]:
    """What a run reading from ``store`` has in its environment (never the secret itself)."""
    return {"AWS_SHARED_CREDENTIALS_FILE": str(store.state_dir / "credentials"), "AWS_EC2_METADATA_DISABLED": "true"}


def uri(path: Path) -> str:
    """Where ``put`` keeps ``path``."""
    return f"s3://{BUCKET}/{path.name}"


def put(store: LocalS3, path: Path, on: Sequence[str] = ()) -> str:
    """``path`` as an object of the bench bucket, through the S3 API (so it has an ETag); its
    URI. ``on``: the prefix that runs a command on the lab host the store is reached from
    (a process there puts it: pyarrow's I/O threads, once started, stay on this host's network)."""
    if on:
        subprocess.run([*on, sys.executable, "-m", __name__, store.endpoint, str(path)], input=store.secret_key(),
                       text=True, check=True, timeout=600)  # fmt: skip
        return uri(path)
    _put(store.endpoint, store.secret_key(), path)
    return uri(path)


def _put(endpoint: str, secret: str, path: Path) -> None:
    from pyarrow import fs

    url = urlparse(endpoint)
    bucket = fs.S3FileSystem(access_key=server.ACCESS_KEY, secret_key=secret, scheme=url.scheme,
                             endpoint_override=url.netloc, region=server.REGION, allow_bucket_creation=True)  # fmt: skip
    bucket.create_dir(BUCKET)
    with open(path, "rb") as f, bucket.open_output_stream(f"{BUCKET}/{path.name}", compression=None) as out:
        while chunk := f.read(8 << 20):
            out.write(chunk)


if __name__ == "__main__":  # put's process on another host: ENDPOINT PATH, the secret on stdin
    _put(sys.argv[1], sys.stdin.read().strip(), Path(sys.argv[2]))
