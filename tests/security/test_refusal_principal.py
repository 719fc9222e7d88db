"""The refusal log names the principal of the connection a refused request came on: a SASL/PLAIN
or SCRAM user refused by the authorizer is that user in the log, an anonymous PLAINTEXT client
``User:ANONYMOUS`` (every line said ANONYMOUS, whoever it was)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.testing import BrokerProcess, wait_for
from tests.security.test_authorization import _broker, conf

T = 20.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = _broker(
        tmp_path_factory.mktemp("refusals") / "data",
        **{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"},
    )
    try:
        yield b
    finally:
        b.stop()


def _refused_create(client_conf: dict[str, Any]) -> str:
    topic = f"refused-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client_conf)
    with pytest.raises(Exception, match=r"(?i)authoriz"):
        admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=T)[topic].result(timeout=T)
    return topic


def _line(broker: BrokerProcess, topic: str) -> str:
    found = wait_for(
        lambda: next((ln for ln in list(broker.stderr_lines) if "Refused CREATE_TOPICS" in ln and topic in ln), None),
        T, f"the refusal line of {topic}",
    )
    assert isinstance(found, str)
    return found


def test_a_sasl_plain_user_refused_by_an_acl_is_named(broker: BrokerProcess) -> None:
    topic = _refused_create(conf(broker, "bob"))
    line = _line(broker, topic)
    assert re.search(r"Refused CREATE_TOPICS from 127\.0\.0\.1 \(principal=User:bob, clientId=[^)]*\): "
                     rf"topic={topic}: TOPIC_AUTHORIZATION_FAILED \(29\)", line), line


def test_a_scram_user_refused_by_an_acl_is_named(broker: BrokerProcess) -> None:
    su = AdminClient(conf(broker, "admin"))
    for f in su.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("dora", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dora-pw")]
    ).values():
        f.result(T)
    topic = _refused_create({
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "dora", "sasl.password": "dora-pw",
    })
    assert "(principal=User:dora," in _line(broker, topic)


def test_an_anonymous_client_is_anonymous(broker: BrokerProcess) -> None:
    topic = _refused_create(conf(broker, None))
    assert "(principal=User:ANONYMOUS," in _line(broker, topic)
