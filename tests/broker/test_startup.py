"""odradek serve: configuration sources, identity files, clean shutdown and start-up errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.config import BrokerConfig, ConfigError
from odradek.testing import BrokerProcess


def test_config_sources_take_precedence_in_order(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("# comment\nnum.partitions=3\nlog.retention.hours=24\nmessage.max.bytes = 2000000\n")
    cfg = BrokerConfig.load(
        props,
        overrides=["num.partitions=5"],
        flags={"log.dirs": str(tmp_path / "d")},
        env={"ODRADEK_LOG_RETENTION_HOURS": "12", "ODRADEK_NUM_PARTITIONS": "4"},
    )
    assert cfg.get("num.partitions") == 5  # override beats env beats file
    assert cfg.get("log.retention.hours") == 12  # env beats file
    assert cfg.get("message.max.bytes") == 2000000
    assert cfg.topic_default("retention.ms") == (12 * 3600000, "log.retention.hours")
    assert cfg.log_dirs == [tmp_path / "d"]
    assert cfg.get("auto.create.topics.enable") is True  # Kafka's default
    try:
        BrokerConfig({"num.partitons": "3"})
    except ConfigError as exc:
        assert "num.partitons" in str(exc)
    else:
        raise AssertionError("a misspelt config name must be an error")


def test_a_tls_listener_without_a_keystore_fails_with_a_clear_message(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--data-dir", str(tmp_path / "d"), "--override",
         "listeners=SSL://127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert "listener SSL needs a keystore: ssl.keystore.location" in result.stderr


def test_identity_survives_restarts_and_clean_shutdown_leaves_the_marker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("ids", 4, 1)]).values():
            f.result(10)
        md = admin.list_topics(timeout=10)
        assert len(md.topics["ids"].partitions) == 4
        assert not (data / ".kafka_cleanshutdown").exists()
    meta = dict(line.split("=", 1) for line in (data / "meta.properties").read_text().split())
    cluster_id = meta["cluster.id"]
    assert len(cluster_id) == 22 and meta["broker.id"] == "0"
    assert (data / ".kafka_cleanshutdown").exists()
    topic_id = (data / "ids-0" / "partition.metadata").read_text()
    assert "topic_id: " in topic_id
    with BrokerProcess(data) as broker:
        assert cluster_id in broker.ready_line
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        md = admin.list_topics(timeout=10)
        assert len(md.topics["ids"].partitions) == 4
        assert (data / "ids-0" / "partition.metadata").read_text() == topic_id
        assert not (data / ".kafka_cleanshutdown").exists()
