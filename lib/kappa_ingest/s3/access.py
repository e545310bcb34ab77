"""How the project reaches a store: its settings, a filesystem built from them where it is
used, and the store's errors as the project's.

Keys are never settings of ours. pyarrow's S3 filesystem, given none, asks the AWS SDK's
standard chain wherever it is built: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
(``AWS_SESSION_TOKEN``), ``AWS_PROFILE`` and the shared credentials and config files, a
container's or an instance's role. So the driver and each executor find keys by the same
rule on their own machine, and what crosses to the executors (``S3Access``: endpoint,
region, timeouts) holds no secret: not in Spark's settings, its UI, its event log, the
report or the Delta store.

The endpoint of an S3-compatible store: ``--s3-endpoint``, else ``AWS_ENDPOINT_URL_S3``,
else ``AWS_ENDPOINT_URL`` (read here: pyarrow's constructor ignores them,
apache/arrow#49643). With an endpoint, requests are path-style (``/bucket/key``).
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

from kappa_ingest.errors import InputError, KappaError, UsageError

DEFAULT_REGION = "us-east-1"
SCHEMES = ("s3", "s3a")


class StoreUnavailable(KappaError):
    """The object store unreachable, or refusing the run's credentials (exit 4)."""

    exit_code = 4


def is_s3(uri: str) -> bool:
    return urlparse(uri).scheme in SCHEMES


def split_uri(uri: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key`` (``s3a://`` alike)."""
    url = urlparse(uri)
    if not url.netloc:
        raise InputError(f"input {uri}: no bucket; give s3://BUCKET/KEY")
    return url.netloc, url.path.lstrip("/")


def canonical(uri: str) -> str:
    """The one name of an object: ``s3a://b/k`` is ``s3://b/k``."""
    bucket, key = split_uri(uri)
    return f"s3://{bucket}/{key}"


@dataclass(frozen=True)
class S3Access:
    """What a process needs to reach the store, beside the keys its own chain finds."""

    endpoint: str = ""  # scheme://host[:port] of an S3-compatible store; "" for AWS itself
    region: str = DEFAULT_REGION
    connect_timeout_s: float = 3.0
    request_timeout_s: float = 20.0  # an idle limit: a slow but flowing read is not cut off
    attempts: int = 3

    @classmethod
    def resolve(cls, endpoint: str | None = None, region: str | None = None) -> S3Access:
        endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
        if endpoint:
            url = urlparse(endpoint)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise UsageError(f"S3 endpoint {endpoint}: give it as http://HOST:PORT or https://HOST[:PORT]")
            endpoint = f"{url.scheme}://{url.netloc}"
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        return cls(endpoint, region)

    def where(self) -> str:
        return self.endpoint or f"AWS S3 ({self.region})"

    def quick(self) -> S3Access:
        """The driver's checks before Spark starts: one attempt, so an unreachable store is
        named within seconds rather than after the retries."""
        return replace(self, attempts=1, request_timeout_s=10.0)

    def filesystem(self, create_buckets: bool = False):  # type: ignore[no-untyped-def]
        return _filesystem(self, create_buckets)


@cache
def _filesystem(access: S3Access, create_buckets: bool = False):  # type: ignore[no-untyped-def]
    """One filesystem per process and settings (built where used, never pickled: pickling
    pyarrow's drops its retry strategy, and would carry any explicit keys in the clear)."""
    if access.endpoint:  # no instance role serves another store: the SDK's probe for one only costs seconds
        os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    _remember_secrets()
    from pyarrow import fs

    url = urlparse(access.endpoint) if access.endpoint else None
    return fs.S3FileSystem(
        region=access.region,
        scheme=url.scheme if url else "https",
        endpoint_override=url.netloc if url else None,
        connect_timeout=access.connect_timeout_s,
        request_timeout=access.request_timeout_s,
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=access.attempts),
        allow_bucket_creation=create_buckets,
    )


def _remember_secrets() -> None:
    """Keys the chain may read from the environment are masked in whatever the run writes."""
    from kappa_ingest.kafka.credentials import remember

    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if os.environ.get(name):
            remember(os.environ[name])


def profile_keys() -> dict[str, str]:
    """The static keys of the profile the AWS chain would use (``AWS_PROFILE``, else
    ``default``), from the shared credentials file, else the config file; none if it holds
    none (a role or SSO profile: delta-rs's own chain is left to find keys)."""
    from kappa_ingest.kafka.credentials import remember

    profile = os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE") or "default"
    home = Path.home() / ".aws"
    places = (
        (os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / "credentials", profile),
        (
            os.environ.get("AWS_CONFIG_FILE") or home / "config",
            profile if profile == "default" else f"profile {profile}",
        ),
    )
    for path, section in places:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path)
        except configparser.Error:
            continue
        if parser.has_option(section, "aws_access_key_id") and parser.has_option(section, "aws_secret_access_key"):
            keys = {"AWS_ACCESS_KEY_ID": parser.get(section, "aws_access_key_id"),
                    "AWS_SECRET_ACCESS_KEY": parser.get(section, "aws_secret_access_key")}  # fmt: skip
            if parser.has_option(section, "aws_session_token"):
                keys["AWS_SESSION_TOKEN"] = parser.get(section, "aws_session_token")
            for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
                if name in keys:
                    remember(keys[name])
            return keys
    return {}


def static_keys() -> dict[str, str]:
    """The keys the AWS chain finds first when they are plain values: the environment's, else
    the profile's (:func:`profile_keys`); none when only a role, SSO or an instance holds them."""
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        _remember_secrets()
        return {name: os.environ[name] for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
                if os.environ.get(name)}  # fmt: skip
    return profile_keys()


def store_error(e: OSError, uri: str, access: S3Access, role: str = "input", option: str = "--input") -> KappaError:
    """The store's answer, as pyarrow raises it, as the project's error (see :func:`store_answer`)."""
    from kappa_ingest.kafka.credentials import mask

    text = mask(str(e))
    if isinstance(e, FileNotFoundError) or "NO_SUCH_KEY" in text:
        kind = "no-object"
    elif "NO_SUCH_BUCKET" in text:
        kind = "no-bucket"
    elif "ACCESS_DENIED" in text or "INVALID_ACCESS_KEY_ID" in text or "SIGNATURE_DOES_NOT_MATCH" in text:
        kind = "denied"
    elif "NETWORK_CONNECTION" in text or "curlCode" in text:
        kind = "unreachable"
    else:
        kind = "failed"
    return store_answer(kind, _reason(text), uri, access, role, option)


def store_answer(
    kind: str, reason: str, uri: str, access: S3Access, role: str = "input", option: str = "--input"
) -> KappaError:
    """What the input (or ``role``, given by ``option``) names is missing (``kind``
    "no-object", "no-bucket": exit 3), or the store refuses the credentials ("denied"), is
    out of reach ("unreachable") or fails otherwise ("failed"): exit 4. ``reason``: the
    store's or the connection's own words."""
    if kind == "no-object":
        return InputError(f"{role} {uri}: no such object in the store ({access.where()}); check {option}")
    if kind == "no-bucket":
        return InputError(f"{role} {uri}: no such bucket at {access.where()}; check {option} (and --s3-endpoint)")
    if kind == "denied":
        return StoreUnavailable(
            f"{role} {uri}: access denied by the store at {access.where()}; check the credentials"
            " (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE) and what they may read"
        )
    if kind == "unreachable":
        return StoreUnavailable(
            f"{role} {uri}: the store at {access.where()} did not answer ({reason}); check --s3-endpoint"
            " (or AWS_ENDPOINT_URL) and that the store is up"
        )
    return StoreUnavailable(f"{role} {uri}: the store at {access.where()} failed: {reason}")


def _reason(text: str) -> str:
    """The SDK's own words, on one line and short."""
    line = " ".join(text.split())
    for marker in ("Details: ", "operation: "):
        if marker in line:
            line = line.split(marker, 1)[1]
    return line[:200]
