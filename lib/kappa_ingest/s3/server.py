"""A local S3 server for tests and newcomers: S3Proxy (Apache-2.0, one jar from Maven
Central) on its filesystem backend, started on 127.0.0.1 and stopped by its PID.

It checks request signatures (AWS v2 and v4) against the one key pair it is given, keeps
each bucket as a directory under ``state_dir/data`` and each object's ETag in an extended
attribute: objects must be put through the S3 API (a file copied into the directory has no
ETag). ``kappa-ingest s3 start`` prints the endpoint and where the key pair is kept.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kappa_ingest import processes
from kappa_ingest.errors import UsageError
from kappa_ingest.paths import cache_dir

S3PROXY_VERSION = "4.1.0"
STATE_FILE = "s3.json"
ACCESS_KEY = "kappa-local"
REGION = "us-east-1"


def jar_path() -> Path:
    """S3Proxy's jar (with its dependencies) in the cache, fetched with Maven the first time."""
    target = cache_dir() / f"s3proxy-{S3PROXY_VERSION}"
    jar = target / f"s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar"
    if jar.exists():
        return jar
    if shutil.which("mvn") is None:
        raise UsageError("Maven (mvn) is needed to fetch the S3Proxy jar; install Maven 3.8+")
    target.mkdir(parents=True, exist_ok=True)
    artifact = f"org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies"
    cmd = ["mvn", "-B", "-q", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={target}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not jar.exists():
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise UsageError(f"could not fetch S3Proxy {S3PROXY_VERSION} with Maven: {' | '.join(tail)}")
    return jar


@dataclass(frozen=True)
class LocalS3:
    state_dir: Path
    pid: int
    port: int
    host: str = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def secret_file(self) -> Path:
        return self.state_dir / "secret-access-key"

    def secret_key(self) -> str:
        return self.secret_file.read_text().strip()

    def environment(self) -> dict[str, str]:
        """The variables an S3 client (this project's, the AWS CLI, delta-rs) needs to use it."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": self.secret_key(), "AWS_REGION": REGION,
                "AWS_EC2_METADATA_DISABLED": "true"}  # fmt: skip

    def alive(self) -> bool:
        return processes.alive(self.pid)

    def stop(self, timeout_s: float = 20.0) -> None:
        processes.stop([self.pid], timeout_s)
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)


def start(
    state_dir: Path | str,
    port: int | None = None,
    secret: str | None = None,
    timeout_s: float = 60.0,
    host: str = "127.0.0.1",
) -> LocalS3:
    """Start S3Proxy on ``host`` (an address of this machine, or of the network namespace
    the calling thread is in: a lab host's) with its data in ``state_dir/data`` and a key
    pair of its own (the secret made at the first start unless given, kept in
    ``state_dir/secret-access-key``, mode 0600)."""
    from kappa_ingest.kafka.broker import free_port

    java = shutil.which("java")
    if java is None:
        raise UsageError("Java 17 is needed to run the local S3 server; install a JDK")
    state_dir = Path(state_dir).resolve()
    running = status(state_dir)
    if running is not None:
        raise UsageError(f"a local S3 server is already running from {state_dir} at {running.endpoint}")
    (state_dir / "data").mkdir(parents=True, exist_ok=True)
    kept = state_dir / "secret-access-key"
    if secret is not None or not kept.exists():
        kept.touch(mode=0o600)
        kept.write_text((secret or secrets.token_urlsafe(24)) + "\n")
    port = port or free_port()
    # The key pair in a file of its own (0600), not on the command line: ps would show it.
    props = state_dir / "s3proxy.properties"
    props.touch(mode=0o600)
    props.write_text(
        f"s3proxy.endpoint=http://{host}:{port}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={ACCESS_KEY}\n"
        f"s3proxy.credential={kept.read_text().strip()}\n"
        "jclouds.provider=filesystem\n"
        f"jclouds.filesystem.basedir={state_dir / 'data'}\n"
    )
    with open(state_dir / "s3proxy.log", "ab") as log:
        proc = subprocess.Popen(
            [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-jar", str(jar_path()), "--properties", str(props)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env={"PATH": "/usr/bin:/bin", "LOG_LEVEL": "warn", "JETTY_LOG_LEVEL": "warn"},
        )  # fmt: skip
    server = LocalS3(state_dir, proc.pid, port, host)
    (state_dir / STATE_FILE).write_text(json.dumps({"pid": proc.pid, "port": port, "host": host}))
    deadline = time.monotonic() + timeout_s
    while not _healthy(server.endpoint):
        if proc.poll() is not None:
            (state_dir / STATE_FILE).unlink(missing_ok=True)
            raise UsageError(f"the local S3 server exited at start-up; see {state_dir / 's3proxy.log'}")
        if time.monotonic() > deadline:
            server.stop()
            raise UsageError(
                f"the local S3 server did not answer in {timeout_s:.0f} s; see {state_dir / 's3proxy.log'}"
            )
        time.sleep(0.2)
    return server


def _healthy(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def status(state_dir: Path | str) -> LocalS3 | None:
    """The server recorded in ``state_dir``, if it is still running."""
    state_dir = Path(state_dir).resolve()
    f = state_dir / STATE_FILE
    if not f.exists():
        return None
    state = json.loads(f.read_text())
    server = LocalS3(state_dir, int(state["pid"]), int(state["port"]), state.get("host", "127.0.0.1"))
    return server if server.alive() else None


def stop(state_dir: Path | str) -> bool:
    """Stop the server recorded in ``state_dir``; False if none was running."""
    server = status(state_dir)
    if server is None:
        (Path(state_dir) / STATE_FILE).unlink(missing_ok=True)
        return False
    server.stop()
    return True
