"""The security page's (docs/security.md) secured server.properties is read by the broker's configuration as written."""

from __future__ import annotations

import re
from pathlib import Path

from odradek.config import BrokerConfig, read_properties


def test_the_readme_server_properties_parse(tmp_path: Path) -> None:
    section = Path(__file__).resolve().parents[2].joinpath("docs", "security.md").read_text()
    block = re.search(r"```properties\n(.*?)```", section, re.S)
    assert block is not None
    path = tmp_path / "server.properties"
    path.write_text(block.group(1))
    config = BrokerConfig(read_properties(path))
    config.validate()
    assert [(lst.name, lst.security_protocol) for lst in config.listeners] == [
        ("PLAINTEXT", "PLAINTEXT"), ("MTLS", "SSL"), ("EXTERNAL", "SASL_SSL"), ("INTERNAL", "SASL_SSL"),
    ]
    assert config.for_listener("MTLS", "ssl.client.auth") == "required"
    assert config.for_listener("EXTERNAL", "ssl.client.auth") == "none"
    assert config.get("ssl.keystore.location") == "/etc/odradek/broker-keystore.pem"
    assert "user_alice" in str(config.for_listener("EXTERNAL", "sasl.jaas.config", "PLAIN"))
    assert "username=\"broker\"" in str(config.for_listener("INTERNAL", "sasl.jaas.config", "SCRAM-SHA-512"))
