"""A misspelt configuration name gets the same clear error wherever it is given — server.properties,
an ``ODRADEK_*`` variable, ``--override``, a client config dict, a Spark source or sink option —
naming where it was and the valid name meant."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from odradek.client import ClientConfigError, Consumer, Producer
from odradek.config import BrokerConfig, ConfigError, nearest_name
from odradek.spark._options import parse_sink_options, parse_source_options

SUGGESTS = "(did you mean 'log.retention.hours'?)"


def test_server_properties(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("log.retention.hour=3\n")
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(props, env={})
    assert f"unknown broker configuration 'log.retention.hour' in {props} {SUGGESTS}" in str(info.value)


def test_environment_variable() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(None, env={"ODRADEK_LOG_RETENTION_HOUR": "3"})
    assert "unknown environment variable 'ODRADEK_LOG_RETENTION_HOUR' (did you mean 'ODRADEK_LOG_RETENTION_HOURS'?)" in str(
        info.value
    )
    # the variables that are not configs are not errors
    cfg = BrokerConfig.load(None, env={"ODRADEK_EXAMPLES": "/x", "ODRADEK_TEST_ANYTHING": "1", "ODRADEK_LOG_RETENTION_HOURS": "3"})
    assert cfg.get("log.retention.hours") == 3


def test_override_through_the_command_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--data-dir", str(tmp_path / "d"), "--override", "log.retention.hour=3"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert result.returncode != 0
    assert f"unknown broker configuration 'log.retention.hour' in --override {SUGGESTS}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir()), "a refused start wrote data"


def test_client_config_dict_and_keyword() -> None:
    with pytest.raises(ClientConfigError) as info:
        Producer({"bootstrap.servers": "127.0.0.1:1", "linger.m": 5})
    assert "unknown client configuration 'linger.m' (did you mean 'linger.ms'?)" in str(info.value)
    with pytest.raises(ClientConfigError) as info:
        Consumer(bootstrap_servers="127.0.0.1:1", group_id="g", auto_offset_rest="earliest")
    assert "(did you mean 'auto.offset.reset'?)" in str(info.value)


def test_spark_source_and_sink_options() -> None:
    base = {"subscribe": "t", "kafka.bootstrap.servers": "127.0.0.1:1"}
    with pytest.raises(ValueError, match=r"unknown odradek source option 'startingoffset' \(did you mean 'startingOffsets'\?\)"):
        parse_source_options({**base, "startingOffset": "earliest"}, streaming=False)
    with pytest.raises(ValueError, match=r"unknown Kafka option 'kafka.bootstrap.server' \(did you mean 'kafka.bootstrap.servers'\?\)"):
        parse_source_options({"subscribe": "t", "kafka.bootstrap.server": "127.0.0.1:1"}, streaming=False)
    with pytest.raises(ValueError, match=r"unknown odradek sink option 'topics' \(did you mean 'topic'\?\)"):
        parse_sink_options({"topics": "t", "kafka.bootstrap.servers": "127.0.0.1:1"})
    # Spark's own options, and options unlike any, pass (Spark's Kafka source ignores them)
    parse_sink_options({"topic": "t", "kafka.bootstrap.servers": "127.0.0.1:1", "checkpointLocation": "/c"})
    assert parse_source_options({**base, "someOtherSetting": "1"}, streaming=False).topics == ("t",)


def test_nearest_name_only_when_close() -> None:
    assert nearest_name("num.partitons", ["num.partitions", "num.io.threads"]) == "num.partitions"
    assert nearest_name("completely.different", ["num.partitions", "num.io.threads"]) is None
    assert nearest_name("MAXOFFSETSPERTRIGER", ["maxOffsetsPerTrigger"], ignore_case=True) == "maxOffsetsPerTrigger"
