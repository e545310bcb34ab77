"""A bench's lab, once stopped, gives back the disk its records took and keeps its logs."""

from kappa_ingest.lab import hosts


def test_a_stopped_labs_records_and_objects_go_its_settings_and_logs_stay(tmp_path):
    kept = [tmp_path / "kafka" / "broker-1" / "logs" / "server.log", tmp_path / "kafka" / "broker-1" / "server.properties",
            tmp_path / "s3" / "s3proxy.log", tmp_path / "proxy-b1.log"]  # fmt: skip
    gone = [tmp_path / "kafka" / "broker-1" / "data" / "t-0" / "00000000000000000000.log",
            tmp_path / "kafka" / "broker-2" / "data" / "meta.properties", tmp_path / "s3" / "data" / "b" / "o.csv"]  # fmt: skip
    for f in kept + gone:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x")
    hosts.discard_data(tmp_path)
    assert all(f.exists() for f in kept)
    assert not any(f.parent.exists() for f in gone)
