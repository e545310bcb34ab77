"""The listing's own requests: signed as AWS documents SigV4, sent where the store expects
them, with the keys the chain would find first."""

from __future__ import annotations

from datetime import UTC, datetime

from kappa_ingest.kafka.credentials import mask
from kappa_ingest.s3.access import S3Access, static_keys
from kappa_ingest.s3.signed_list import _where, sign

EXAMPLE_KEYS = {
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
}


def test_a_listing_is_signed_as_the_aws_documentations_example_is():
    """ "Example: GET Bucket (List Objects)" of AWS's "Signature Calculations for the
    Authorization Header" (sig-v4-header-based-auth), its published signature."""
    headers = sign("GET", "examplebucket.s3.amazonaws.com", "/", "max-keys=2&prefix=J", "us-east-1", EXAMPLE_KEYS,
                   datetime(2013, 5, 24, tzinfo=UTC))  # fmt: skip
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
        "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
    )
    with_token = sign("GET", "h", "/", "", "us-east-1", {**EXAMPLE_KEYS, "AWS_SESSION_TOKEN": "tok"})
    assert with_token["x-amz-security-token"] == "tok" and "x-amz-security-token" in with_token["Authorization"]


def test_a_bucket_is_reached_path_style_at_an_endpoint_and_virtual_hosted_on_aws():
    assert _where("landing", S3Access("http://127.0.0.1:9000")) == ("http", "127.0.0.1:9000", "/landing")
    assert _where("landing", S3Access(region="eu-west-1")) == ("https", "landing.s3.eu-west-1.amazonaws.com", "/")
    assert _where("a.b", S3Access(region="eu-west-1")) == ("https", "s3.eu-west-1.amazonaws.com", "/a.b")


def test_the_environments_keys_come_before_the_profiles_and_are_masked(aws_files):
    assert static_keys() == {"AWS_ACCESS_KEY_ID": "AKDEFAULT", "AWS_SECRET_ACCESS_KEY": "default-secret-1234"}
    aws_files.setenv("AWS_ACCESS_KEY_ID", "AKENV")
    aws_files.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-8765")
    assert static_keys() == {"AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "env-secret-8765"}
    assert mask("signed with env-secret-8765") == "signed with ***"
    aws_files.delenv("AWS_ACCESS_KEY_ID")
    aws_files.setenv(
        "AWS_PROFILE", "sso"
    )  # no plain keys: the caller lists through the SDK, which knows the whole chain
    assert static_keys() == {}
