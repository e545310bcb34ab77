"""A metrics directory, local or in a store: files written whole and read back, its runs
listed; and the keys delta-rs is given for a store, found as the AWS chain finds them."""

from __future__ import annotations

from kappa_ingest.kafka.credentials import mask
from kappa_ingest.s3.access import S3Access, profile_keys
from kappa_ingest.s3.directory import Directory, delta_options


def test_a_local_directory_writes_whole_files_and_lists_its_runs(tmp_path):
    where = Directory.at(tmp_path / "m")
    assert not where.in_store and where.read_text("runs", "a", "summary.json") is None and where.children("runs") == []
    path = where.write_text('{"run_id": "a"}\n', "runs", "a", "summary.json")
    where.write_text("x", "runs", "b", "summary.json")
    assert path == str(tmp_path / "m" / "runs" / "a" / "summary.json")
    assert where.read_text("runs", "a", "summary.json") == '{"run_id": "a"}\n'
    assert where.children("runs") == ["a", "b"] and where.files("runs", "a") == ["summary.json"]  # no .tmp left
    assert where.sub("runs", "a").root == f"{tmp_path / 'm'}/runs/a"
    assert Directory.at(where) is where


def test_an_s3_directory_is_named_canonically_and_reached_at_its_endpoint():
    where = Directory.at("s3a://ops/kappa-metrics/", "http://127.0.0.1:9000")
    assert where.root == "s3://ops/kappa-metrics" and where.in_store
    assert where.access == S3Access("http://127.0.0.1:9000")
    assert where.join("runs", "r", "summary.json") == "s3://ops/kappa-metrics/runs/r/summary.json"
    uri, options = where.table("delta", "runs")
    assert uri == "s3://ops/kappa-metrics/delta/runs"
    assert options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000" and options["AWS_ALLOW_HTTP"] == "true"
    assert options["conditional_put"] == "etag"


def test_delta_rs_is_given_the_profiles_keys_which_are_then_masked(aws_files):
    assert profile_keys() == {"AWS_ACCESS_KEY_ID": "AKDEFAULT", "AWS_SECRET_ACCESS_KEY": "default-secret-1234"}
    # Given to delta-rs for a store at an endpoint, where its chain reads no profile; on AWS its chain does.
    assert delta_options(S3Access("http://127.0.0.1:9000"))["AWS_SECRET_ACCESS_KEY"] == "default-secret-1234"
    assert "AWS_SECRET_ACCESS_KEY" not in delta_options(S3Access())
    aws_files.setenv("AWS_PROFILE", "ops")  # a named profile, in the config file's "profile NAME" section
    assert profile_keys() == {"AWS_ACCESS_KEY_ID": "AKOPS", "AWS_SECRET_ACCESS_KEY": "ops-secret-5678",
                              "AWS_SESSION_TOKEN": "ops-token-9999"}  # fmt: skip
    assert mask("failed with ops-secret-5678 and ops-token-9999") == "failed with *** and ***"
    aws_files.setenv("AWS_PROFILE", "sso")  # no static keys: delta-rs's own chain is left to find them
    assert profile_keys() == {}
    assert "AWS_SECRET_ACCESS_KEY" not in delta_options(S3Access("http://127.0.0.1:9000"))


def test_keys_in_the_environment_are_left_to_delta_rs_to_read(aws_files):
    aws_files.setenv("AWS_ACCESS_KEY_ID", "AKENV")
    aws_files.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-0000")
    options = delta_options(S3Access("http://127.0.0.1:9000"))
    assert "AWS_ACCESS_KEY_ID" not in options and "AWS_SECRET_ACCESS_KEY" not in options
    assert "AWS_ENDPOINT_URL" not in delta_options(S3Access())  # AWS itself
    assert options["max_retries"] == "2" and options["connect_timeout"] == "3s"  # the project's own bounds
