"""A topic that exists in the cluster but is not (yet) in this broker's metadata image.

A broker that has just restarted in a cluster serves requests before the controller's metadata
reaches it.  A client asking it about an existing topic must get a retriable LEADER_NOT_AVAILABLE
(as Kafka answers when auto-creation finds the topic exists: "possibly another broker created this
topic"), not UNKNOWN_TOPIC_OR_PARTITION: librdkafka takes the latter for a topic that exists no
more and at once drops every partition of it (no propagation grace for a topic known for longer
than ``topic.metadata.propagation.max.ms``) -- consumers report "desired partition is no longer
available", producers strand their queued records until they time out.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from odradek.broker.handlers.metadata import metadata
from odradek.broker.ports import MetadataPort
from odradek.cluster.metadata import MetadataImage
from odradek.config import BrokerConfig
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.settings import settings_from


class _RestartedBroker:
    """The handler's view of a broker whose image does not hold the topic, while the cluster's
    metadata store does (creating it again is refused)."""

    def __init__(self, *, known: bool, auto_create: bool = True) -> None:
        self.created: list[str] = []
        config = BrokerConfig({"auto.create.topics.enable": auto_create, "auto.create.topics.max.per.request": 5})
        self.port = MetadataPort(
            metadata=SimpleNamespace(image=MetadataImage.empty("cluster", controller_id=1)),
            metadata_known=lambda: known,
            topics=SimpleNamespace(auto_create=self._auto_create),  # type: ignore[arg-type]
            authorizer=None,  # no ACLs: every request is allowed
            settings=settings_from(config).server,
        )

    async def _auto_create(self, name: str) -> Any:
        self.created.append(name)
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")


def _ask(broker: _RestartedBroker, version: int, allow: bool, name: str = "history") -> Any:
    ctx = SimpleNamespace(
        ports=SimpleNamespace(metadata=broker.port, authorizer=None),
        version=version,
        listener="PLAINTEXT",
        client_host="127.0.0.1",
        header=SimpleNamespace(client_id="t"),
        authorize=lambda *_a, **_k: True,
        authorize_cluster=lambda *_a, **_k: True,
    )
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=allow)
    return asyncio.run(metadata(ctx, req))  # type: ignore[arg-type]


def test_auto_creating_a_topic_that_exists_but_is_not_in_the_image_is_leader_not_available() -> None:
    for version in (1, 4, 9, 12):
        broker = _RestartedBroker(known=True)
        resp = _ask(broker, version, allow=True)
        assert broker.created == ["history"]
        [t] = resp.topics
        assert t.name == "history"
        assert t.error_code == ErrorCode.LEADER_NOT_AVAILABLE, version
        assert t.partitions == []


def test_before_the_controllers_metadata_every_named_topic_is_leader_not_available() -> None:
    for allow in (True, False):  # producers allow auto-creation, consumers do not
        broker = _RestartedBroker(known=False)
        resp = _ask(broker, 12, allow=allow)
        assert broker.created == []  # nothing is created before the cluster's topics are known
        [t] = resp.topics
        assert t.error_code == ErrorCode.LEADER_NOT_AVAILABLE


def test_an_invalid_name_is_still_refused_before_the_metadata() -> None:
    broker = _RestartedBroker(known=False)
    [t] = _ask(broker, 12, allow=True, name="bad/name").topics
    assert t.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_once_known_a_topic_without_auto_creation_stays_unknown() -> None:
    broker = _RestartedBroker(known=True)
    resp = _ask(broker, 12, allow=False)
    assert broker.created == []
    [t] = resp.topics
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
