"""The local S3 server the benchmarks read inputs from (``make bench``'s and ``make soak``'s
"from S3" rows): S3Proxy on this machine, its key pair in a credentials file beside it, as a
user's AWS chain finds one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

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
    """``path`` as an object of the bench bucket, by ``kappa-ingest s3 put`` with the store's
    credentials file; its URI. ``on``: the prefix that runs a command on the lab host the
    store is reached from."""
    cli = str(Path(sys.executable).parent / "kappa-ingest")
    subprocess.run([*on, cli, "s3", "put", str(path), uri(path), "--s3-endpoint", store.endpoint],
                   env={**os.environ, **environment(store)}, capture_output=True, text=True, check=True,
                   timeout=600)  # fmt: skip
    return uri(path)
