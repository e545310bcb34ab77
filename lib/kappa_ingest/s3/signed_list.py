"""ListObjectsV2, asked and signed here (AWS Signature Version 4), for what pyarrow's listing
leaves out: each object's ETag, which is part of its identity in the ledger. With it a
prefix of 10,000 objects is its ten pages, not ten pages and 10,000 HEADs.

Only keys the chain holds as plain values are used (the environment's, a profile's); where a
role, SSO or an instance's metadata holds them, :func:`pages` answers None and the caller
lists through pyarrow, whose AWS SDK knows the whole chain.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import quote, unquote_plus, urlparse

from kappa_ingest.s3.access import S3Access, static_keys, store_answer
from kappa_ingest.s3.objects import StoreObject, modified_ms

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken")


def pages(bucket: str, prefix: str, access: S3Access, delimiter: str = "") -> Iterator[list[StoreObject]] | None:
    """Each page's objects under ``prefix`` (only those directly under it with ``delimiter``
    "/"), in key order; None when no plain keys are at hand."""
    keys = static_keys()
    if not keys:
        return None
    return _pages(bucket, prefix, access, delimiter, keys)


def _pages(
    bucket: str, prefix: str, access: S3Access, delimiter: str, keys: dict[str, str]
) -> Iterator[list[StoreObject]]:
    token = ""
    while True:
        query = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
        if delimiter:
            query["delimiter"] = delimiter
        if token:
            query["continuation-token"] = token
        root = ET.fromstring(_get(bucket, query, access, keys))
        yield [_object(bucket, c) for c in root.iter(f"{NS}Contents")]
        token = root.findtext(f"{NS}NextContinuationToken") or ""
        if root.findtext(f"{NS}IsTruncated") != "true" or not token:
            return


def _object(bucket: str, contents: ET.Element) -> StoreObject:
    key = unquote_plus(contents.findtext(f"{NS}Key") or "")  # encoding-type=url: keys with any byte survive XML
    return StoreObject(
        f"s3://{bucket}/{key}",
        int(contents.findtext(f"{NS}Size") or 0),
        modified_ms(contents.findtext(f"{NS}LastModified") or ""),
        (contents.findtext(f"{NS}ETag") or "").strip('"'),
    )


def _get(bucket: str, query: dict[str, str], access: S3Access, keys: dict[str, str]) -> bytes:
    """One signed GET of the bucket's listing, retried (with backoff) as the SDK would: on
    a connection error, a timeout, a 5xx or a SlowDown. The connect is bounded by
    ``connect_timeout_s``, each read by ``request_timeout_s``, as pyarrow's requests are."""
    scheme, host, path = _where(bucket, access)
    qs = "&".join(f"{_enc(k)}={_enc(v)}" for k, v in sorted(query.items()))
    uri = f"s3://{bucket}/{query['prefix']}"
    for attempt in range(1, access.attempts + 1):
        kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        connection = kind(host, timeout=access.connect_timeout_s)
        try:
            connection.connect()
            assert connection.sock is not None
            connection.sock.settimeout(access.request_timeout_s)
            connection.request("GET", f"{path}?{qs}", headers=sign("GET", host, path, qs, access.region, keys))
            answer = connection.getresponse()
            body = answer.read()
            if answer.status == 200:
                return body
            code = _code(body)
            if (answer.status < 500 and code != "SlowDown") or attempt == access.attempts:
                raise store_answer(_kind(answer.status, code), f"HTTP {answer.status} {code}".rstrip(), uri, access)
        except (OSError, http.client.HTTPException) as e:
            if attempt == access.attempts:
                raise store_answer("unreachable", f"{type(e).__name__}: {e}", uri, access) from e
        finally:
            connection.close()
        time.sleep(min(0.05 * 2**attempt, 2.0))
    raise AssertionError("unreachable")


def _where(bucket: str, access: S3Access) -> tuple[str, str, str]:
    """(scheme, host, path) of the bucket: path-style at an endpoint (as pyarrow is told to
    use there), virtual-hosted on AWS itself (path-style where a dot in the name would break
    the certificate's wildcard)."""
    if access.endpoint:
        url = urlparse(access.endpoint)
        return url.scheme, url.netloc, f"/{_enc(bucket)}"
    if "." in bucket:
        return "https", f"s3.{access.region}.amazonaws.com", f"/{bucket}"
    return "https", f"{bucket}.s3.{access.region}.amazonaws.com", "/"


def sign(
    method: str, host: str, path: str, query: str, region: str, keys: dict[str, str], now: datetime | None = None
) -> dict[str, str]:
    """The headers that sign a request with no body (SigV4, service s3)."""
    now = now or datetime.now(UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": host, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if keys.get("AWS_SESSION_TOKEN"):
        headers["x-amz-security-token"] = keys["AWS_SESSION_TOKEN"]
    names = ";".join(sorted(headers))
    canonical = "\n".join(
        [method, path, query, *(f"{k}:{headers[k]}" for k in sorted(headers)), "", names, EMPTY_SHA256]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + keys["AWS_SECRET_ACCESS_KEY"]).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={keys['AWS_ACCESS_KEY_ID']}/{scope}, SignedHeaders={names}, Signature={signature}"
    )
    return headers


def _enc(value: str) -> str:
    return quote(value, safe="-_.~")


def _code(body: bytes) -> str:
    try:
        return ET.fromstring(body).findtext("Code") or ""
    except ET.ParseError:
        return ""


def _kind(status: int, code: str) -> str:
    """An S3 error answer as :func:`~kappa_ingest.s3.access.store_answer`'s kind."""
    if code == "NoSuchBucket":
        return "no-bucket"
    if code == "NoSuchKey":
        return "no-object"
    return "denied" if code in DENIED or status == 403 else "failed"
