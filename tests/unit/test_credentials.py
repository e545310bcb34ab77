"""Secrets given by reference (``${NAME}``, ``@PATH``) and masked wherever the run writes."""

from __future__ import annotations

import json

import pytest

from kappa_ingest import config
from kappa_ingest.errors import UsageError
from kappa_ingest.kafka import credentials


def test_references_are_read_when_used_and_shown_as_given(tmp_path, monkeypatch):
    monkeypatch.setenv("KI_TEST_PASSWORD", "s3cret-from-env")
    (tmp_path / "user").write_text("app\n")
    cfg = config.validate({"inputs": ["a.csv"], "topic": "t", "kafka_opts": {
        "sasl.password": "${KI_TEST_PASSWORD}", "sasl.username": f"@{tmp_path / 'user'}",
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}})  # fmt: skip
    settings = cfg.producer_settings()
    assert settings["sasl.password"] == "s3cret-from-env" and settings["sasl.username"] == "app"
    shown = cfg.masked()["kafka_opts"]
    assert shown["sasl.password"] == "${KI_TEST_PASSWORD}" and shown["sasl.username"] == f"@{tmp_path / 'user'}"
    assert credentials.mask("failed with s3cret-from-env") == "failed with ***"


def test_a_literal_secret_is_masked_in_the_report_and_inside_a_jaas_line():
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="app" password="pa\\"ss-lit";'
    cfg = config.validate({"inputs": ["a.csv"], "topic": "t", "sink": "spark",
                           "kafka_opts": {"sasl.jaas.config": jaas, "ssl.truststore.password": "trust-pw-1"}})  # fmt: skip
    cfg.producer_settings()
    assert cfg.masked()["kafka_opts"]["sasl.jaas.config"] == "***"
    text = json.dumps({"error": 'login failed: password="pa\\"ss-lit" / trust-pw-1 / pa"ss-lit'})
    assert "ss-lit" not in credentials.mask(text) and "trust-pw-1" not in credentials.mask(text)


@pytest.mark.parametrize(
    ("value", "message"),
    [("${KI_TEST_UNSET_VARIABLE}", "environment variable KI_TEST_UNSET_VARIABLE is not set"),
     ("@/no/such/secret/file", "cannot read /no/such/secret/file")],
)  # fmt: skip
def test_a_missing_reference_is_a_usage_error_that_shows_no_value(value, message):
    with pytest.raises(UsageError, match=message):
        config.validate({"inputs": ["a.csv"], "topic": "t", "kafka_opts": {"sasl.password": value}})
