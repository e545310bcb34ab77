"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def aws_files(tmp_path, monkeypatch):
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
    ):
        monkeypatch.delenv(name, raising=False)
    credentials, config = tmp_path / "credentials", tmp_path / "config"
    credentials.write_text("[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = default-secret-1234\n")
    config.write_text("[profile ops]\naws_access_key_id = AKOPS\naws_secret_access_key = ops-secret-5678\n"
                      "aws_session_token = ops-token-9999\n[profile sso]\nsso_session = corp\n")  # fmt: skip
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    return monkeypatch
