"""Configuration: YAML under the command line, validated with errors that name the key."""

from __future__ import annotations

import argparse
import re
from datetime import UTC

import pytest

from kappa_ingest import config
from kappa_ingest.config import command_line
from kappa_ingest.config.choices import DEFAULT_SINK
from kappa_ingest.errors import UsageError


def load(argv: list[str]) -> config.IngestConfig:
    p = argparse.ArgumentParser()
    config.add_ingest_arguments(p)
    return config.load(p.parse_args(argv))


def test_command_line_wins_over_yaml(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(
        "input: [a.csv]\ntopic: from-yaml\nsink: spark\npartitions: 4\nkafka-opt:\n  linger.ms: 5\n  acks: 1\n"
    )
    cfg = load(["--config", str(f), "--topic", "from-cli", "--kafka-opt", "linger.ms=20"])
    assert cfg.inputs == ("a.csv",) and cfg.topic == "from-cli" and cfg.sink == "spark" and cfg.partitions == 4
    assert cfg.producer_settings() == {"acks": "1", "enable.idempotence": "true", "linger.ms": "20"}
    assert cfg.config_file == str(f)


def test_defaults_and_generated_run_id():
    cfg = config.validate({"inputs": ["x.csv"], "topic": "t"})
    assert cfg.sink == "confluent" and cfg.delimiter == "," and cfg.quote == cfg.escape == '"' and cfg.header
    assert cfg.producer_settings() == {"acks": "all", "enable.idempotence": "true"}
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", cfg.run_id)
    from datetime import datetime

    earlier = config.new_run_id(datetime(2026, 11, 22, 9, 59, 59, tzinfo=UTC))
    later = config.new_run_id(datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC))
    assert earlier < later and later.startswith("20261122T100000Z-")


def test_the_shipped_conf_file_loads():
    cfg = config.validate({**command_line._read_yaml(config.default_config()), "inputs": ["x"], "topic": "t"})
    assert cfg.sink == DEFAULT_SINK


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"topic": "t"}, "no input"),
        ({"inputs": ["x"]}, "no topic"),
        ({"inputs": ["x"], "topic": "bad topic!"}, "topic"),
        ({"inputs": ["x"], "topic": "t", "sink": "nope"}, "accepted: confluent, spark, kafka-python"),
        ({"inputs": ["x"], "topic": "t", "partitions": 0}, "--partitions 0"),
        ({"inputs": ["x"], "topic": "t", "delimiter": ";;"}, "--delimiter"),
        ({"inputs": ["x"], "topic": "t", "target_rate": -5}, "--target-rate"),
        ({"inputs": ["x"], "topic": "t", "event_time_format": "yyyy"}, "needs --event-time-column"),
        ({"inputs": ["x"], "topic": "t", "bootstrap_servers": "nohost"}, "HOST:PORT"),
        ({"inputs": ["x"], "topic": "t", "kafka_opts": {"bootstrap.servers": "x:1"}}, "set by kappa-ingest"),
        (
            {"inputs": ["x"], "topic": "t", "max_files": 3, "on_changed": "resend"},
            "--on-changed and --max-files without --incremental",
        ),
        ({"inputs": ["x"], "topic": "t", "incremental": True, "max_bytes": "lots"}, "--max-bytes 'lots'"),
        ({"inputs": ["x"], "topic": "t", "incremental": True, "on_changed": "ignore"}, "accepted: refuse, resend"),
        ({"inputs": ["x"], "topic": "t", "incremental": True, "resume": "r1"}, "--incremental with --resume"),
    ],
)
def test_bad_values_name_the_setting(values, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        config.validate(values)


def test_unknown_yaml_key_lists_accepted(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("topic: t\nbatchsize: 3\n")
    with pytest.raises(UsageError, match=r"unknown key 'batchsize'; accepted: input, .*key-column"):
        load(["--config", str(f)])


def test_secrets_are_masked_in_the_report():
    cfg = config.validate({"inputs": ["x"], "topic": "t", "sink": "spark",
                           "kafka_opts": {"sasl.password": "hunter2", "sasl.jaas.config": "x password=y"},
                           "bootstrap_servers": "h:9092"})  # fmt: skip
    masked = cfg.masked()
    assert masked["kafka_opts"]["sasl.password"] == "***" and masked["kafka_opts"]["sasl.jaas.config"] == "***"
    assert "hunter2" not in str(masked)


def test_tab_delimiter_and_encoding_names():
    cfg = config.validate({"inputs": ["x"], "topic": "t", "delimiter": "\\t", "encoding": "latin-1"})
    assert cfg.delimiter == "\t" and cfg.encoding == "iso-8859-1"


def test_sizes_are_read_in_units_of_1024():
    assert [config.parse_size(t) for t in ("2G", "500MB", "1.5 GiB", "4096", "10k")] == [
        2 << 30,
        500 << 20,
        3 << 29,
        4096,
        10240,
    ]


def test_a_split_size_is_a_size_and_not_for_incremental_runs():
    assert config.validate({"inputs": ["x"], "topic": "t", "split_size": "16M"}).split_size == 16 << 20
    with pytest.raises(UsageError, match=r"^--split-size 'big': expected a size"):
        config.validate({"inputs": ["x"], "topic": "t", "split_size": "big"})
    with pytest.raises(UsageError, match=r"^--split-size 524288 bytes: at least 1M"):
        config.validate({"inputs": ["x"], "topic": "t", "split_size": "0.5M"})
    with pytest.raises(UsageError, match="--split-size with --incremental"):
        config.validate({"inputs": ["x"], "topic": "t", "split_size": "16M", "incremental": True})


def test_the_installed_conf_file_is_found_from_any_directory_and_named(tmp_path, monkeypatch):
    from kappa_ingest.paths import conf_dir
    from kappa_ingest.report.run import _render_settings

    monkeypatch.chdir(tmp_path)  # a job submitted from elsewhere keeps the shipped producer settings
    cfg = load(["--input", "a.csv", "--topic", "t"])
    assert cfg.config_file == str(conf_dir() / "ingest.yaml")
    assert cfg.producer_settings()["compression.type"] == "lz4"
    assert _render_settings(cfg.masked()) == [f"  settings: {cfg.config_file} + command line"]
    monkeypatch.setenv("KAPPA_INGEST_HOME", str(tmp_path))  # an installation without conf/: said, not silent
    bare = load(["--input", "a.csv", "--topic", "t"])
    assert bare.config_file is None and "compression.type" not in bare.producer_settings()
    assert "no conf/ingest.yaml found" in _render_settings(bare.masked())[0]


def test_null_value_tokens_from_the_command_line_or_yaml(tmp_path):
    cli = load(["--input", "a.csv", "--topic", "t", "--null-value", "NA", "--null-value", "\\N", "--null-value", "NA"])
    assert cli.null_values == ("NA", "\\N")
    f = tmp_path / "c.yaml"
    f.write_text('input: [a.csv]\ntopic: t\nnull-value: [NA, "\\\\N"]\n')
    assert load(["--config", str(f)]).null_values == ("NA", "\\N")
    with pytest.raises(UsageError, match="--null-value"):
        load(["--input", "a.csv", "--topic", "t", "--null-value", ""])
