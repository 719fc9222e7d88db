"""The topic configs have one table (odradek.config.TOPIC_SCHEMA): validation, the broker
fallbacks, the LogConfig defaults, DescribeConfigs' documentation and docs/configuration.md all
read it, so they cannot drift apart again."""

from __future__ import annotations

from pathlib import Path

from odradek.config import (
    BROKER_CONFIGS,
    DEPRECATED_TOPIC_CONFIGS,
    TOPIC_CONFIGS,
    TOPIC_KEYS,
    TOPIC_SCHEMA,
    TOPIC_SYNONYMS,
)
from odradek.protocol.messages.create_topics import CreateTopicsRequest
from odradek.protocol.messages.describe_configs import DescribeConfigsRequest
from odradek.storage.config import DEFAULTS, LogConfig
from odradek.testing import BrokerProcess, WireClient
from tools.configdocs.__main__ import render


def test_every_view_of_the_topic_configs_comes_from_the_one_table() -> None:
    assert len(TOPIC_KEYS) == len(TOPIC_SCHEMA) >= 26
    # the log's defaults: every row Odradek acts on, nothing else
    assert set(DEFAULTS) == {k.name for k in TOPIC_SCHEMA if k.used}
    assert set(TOPIC_CONFIGS) == set(TOPIC_SYNONYMS) == {k.name for k in TOPIC_SCHEMA if k.settable}
    assert set(DEPRECATED_TOPIC_CONFIGS) == {"message.format.version"}
    for key in TOPIC_SCHEMA:
        assert key.doc.strip(), key.name
        for broker_name in key.synonyms:
            assert broker_name in BROKER_CONFIGS, (key.name, broker_name)
        assert not key.used or DEFAULTS[key.name] == key.default
    # a LogConfig built from nothing has the table's defaults
    built = LogConfig.from_dict({}).to_dict()
    assert built == {k.name: k.default for k in TOPIC_SCHEMA if k.used}


def test_the_generated_reference_is_current_and_lists_every_settable_config() -> None:
    text = render()
    assert Path(__file__).resolve().parents[1].joinpath("docs", "configuration.md").read_text() == text
    for name in TOPIC_CONFIGS:
        assert f"| `{name}` |" in text
    for name in BROKER_CONFIGS:
        assert f"| `{name}` |" in text


def test_describe_configs_gives_the_documentation_when_asked(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        client = WireClient(broker.host, broker.port)
        try:
            created = client.request(
                CreateTopicsRequest(
                    topics=[CreateTopicsRequest.CreatableTopic(name="documented", num_partitions=1, replication_factor=1)],
                    timeout_ms=10000,
                ),
                5,
            )
            assert created.topics[0].error_code == 0
            for asked in (True, False):
                resp = client.request(
                    DescribeConfigsRequest(
                        resources=[DescribeConfigsRequest.DescribeConfigsResource(
                            resource_type=2, resource_name="documented", configuration_keys=None)],
                        include_synonyms=True,
                        include_documentation=asked,
                    ),
                    4,
                )
                [result] = resp.results
                assert result.error_code == 0
                docs = {c.name: c.documentation for c in result.configs}
                assert set(docs) == set(TOPIC_CONFIGS)
                if asked:
                    assert docs == {
                        name: TOPIC_KEYS[name].doc if TOPIC_KEYS[name].used
                        else f"Accepted, not used by Odradek. {TOPIC_KEYS[name].doc}"
                        for name in TOPIC_CONFIGS
                    }
                else:
                    assert set(docs.values()) == {None}
        finally:
            client.close()
