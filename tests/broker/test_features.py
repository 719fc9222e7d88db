"""Feature flags and what ApiVersions advertises, as Kafka 4 brokers answer them:

- ApiVersions v3+ lists the supported features and the finalized levels with their epoch
  (transaction.version 2: a Kafka 4.x producer uses transactions v2), as kafka-python's
  describe_features reads them; v3 leaves out supported features whose lowest level is 0
  (KAFKA-17492), v4 lists them;
- the ZooKeeper-era controller APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
  ControlledShutdown) are advertised and served on the inter-broker listener only;
- every advertised API has a handler at the advertised versions, within its message's versions;
- UpdateFeatures (kafka-python's update_features) changes a finalized level as Kafka's controller
  allows it (a downgrade only when asked for, never to a level this broker lacks, metadata.version
  never across a level that changed the metadata), bumps the epoch, and the change survives a
  restart; a validate-only request changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidUpdateVersionError

from odradek.protocol import ApiKey
from odradek.protocol.messages import request_class
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from odradek.testing import BrokerProcess, WireClient

TWO_LISTENERS = {
    "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}
ZK_ERA = {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN}


def _api_versions(host: str, port: int, version: int) -> object:
    w = WireClient(host, port)
    try:
        return w.request(ApiVersionsRequest(client_software_name="test", client_software_version="1"), version)
    finally:
        w.close()


def _kafka_python(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)


def test_finalized_features_as_kafka_python_reads_them(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        admin = _kafka_python(broker.bootstrap)
        try:
            features = admin.describe_features()
        finally:
            admin.close()
    assert features["transaction.version"]["supported"] == (0, 2)
    assert features["transaction.version"]["finalized"] == (2, 2)
    assert features["metadata.version"]["supported"] == (7, 25)
    assert features["metadata.version"]["finalized"] == (25, 25)  # 4.0-IV3
    assert features["metadata.version"]["finalized_epoch"] == 0
    assert features["group.version"]["supported"] == (0, 1)  # KIP-848's consumer groups
    assert features["group.version"]["finalized"] == (1, 1)
    assert features["share.version"]["supported"] == (0, 1)  # KIP-932's share groups
    assert features["share.version"]["finalized"] == (1, 1)
    # not implemented here yet: supported at level 0 only, not finalized
    assert features["streams.version"] == {"supported": (0, 0)}


def test_api_versions_v3_leaves_out_features_whose_lowest_level_is_0(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        v3 = _api_versions(broker.host, broker.port, 3)
        v4 = _api_versions(broker.host, broker.port, 4)
    assert {f.name for f in v3.supported_features} == {"metadata.version"}  # type: ignore[attr-defined]
    assert {"transaction.version", "metadata.version", "group.version"} <= {
        f.name for f in v4.supported_features  # type: ignore[attr-defined]
    }
    for r in (v3, v4):
        assert {f.name: f.max_version_level for f in r.finalized_features} == {  # type: ignore[attr-defined]
            "group.version": 1, "metadata.version": 25, "share.version": 1, "transaction.version": 2,
        }
        assert r.finalized_features_epoch == 0  # type: ignore[attr-defined]


def test_zookeeper_era_apis_are_shown_and_served_on_the_inter_broker_listener_only(tmp_path: Path) -> None:
    listeners = "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0"
    with BrokerProcess(tmp_path / "data", listeners=listeners, overrides=TWO_LISTENERS) as broker:
        client = broker.endpoints["CLIENT"]
        internal = broker.endpoints["INTERNAL"]
        on_client = {k.api_key for k in _api_versions(*client, 3).api_keys}  # type: ignore[attr-defined]
        on_internal = {k.api_key for k in _api_versions(*internal, 3).api_keys}  # type: ignore[attr-defined]
        assert not on_client & ZK_ERA
        assert on_internal >= ZK_ERA
        assert on_internal - on_client == ZK_ERA
        # a LeaderAndIsr on the client listener is an unknown API: the connection is closed
        w = WireClient(*client)
        try:
            with pytest.raises(ConnectionError):
                w.request(LeaderAndIsrRequest(controller_id=1, controller_epoch=1), 5)
        finally:
            w.close()
        # on the inter-broker listener it is answered
        w = WireClient(*internal)
        try:
            assert w.request(LeaderAndIsrRequest(controller_id=1, controller_epoch=1), 5) is not None
        finally:
            w.close()


def test_every_advertised_api_has_a_handler_within_its_message_versions(tmp_path: Path) -> None:
    import odradek.broker.handlers  # noqa: F401  (registers them)
    from odradek.broker.dispatch import HANDLERS

    with BrokerProcess(tmp_path / "data") as broker:
        r = _api_versions(broker.host, broker.port, 4)
    for k in r.api_keys:  # type: ignore[attr-defined]
        entry = HANDLERS[k.api_key]
        assert (entry.min_version, entry.max_version) == (k.min_version, k.max_version)
        lo, hi = request_class(k.api_key).VALID_VERSIONS
        assert lo <= k.min_version <= k.max_version <= hi, k


def test_update_features_as_kafka_controllers_allow_and_the_change_survives_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = _kafka_python(broker.bootstrap)
        try:
            # a downgrade must say so
            with pytest.raises(InvalidUpdateVersionError, match="without setting the upgrade type"):
                admin.update_features({"transaction.version": 1})
            # a level this broker does not implement
            with pytest.raises(InvalidUpdateVersionError, match="only supports versions"):
                admin.update_features({"transaction.version": 3})
            with pytest.raises(InvalidUpdateVersionError, match="does not support this feature"):
                admin.update_features({"streams.version": 1})
            # metadata.version across levels that changed the metadata
            with pytest.raises(InvalidUpdateVersionError, match="might delete metadata"):
                admin.update_features({"metadata.version": ("SAFE_DOWNGRADE", 7)})
            # validate only: nothing changes
            admin.update_features({"transaction.version": ("SAFE_DOWNGRADE", 1)}, validate_only=True)
            assert admin.describe_features()["transaction.version"]["finalized"] == (2, 2)
            assert admin.update_features({"transaction.version": ("SAFE_DOWNGRADE", 1)}) == {"transaction.version": "OK"}
            after = admin.describe_features()
            assert after["transaction.version"]["finalized"] == (1, 1)
            assert after["transaction.version"]["finalized_epoch"] == 1
            # disabled: level 0 is not listed as finalized
            admin.update_features({"transaction.version": ("SAFE_DOWNGRADE", 0)})
            assert "finalized" not in admin.describe_features()["transaction.version"]
            admin.update_features({"transaction.version": 1})
        finally:
            admin.close()
        broker.stop()
        broker.start()
        admin = _kafka_python(broker.bootstrap)
        try:
            features = admin.describe_features()
        finally:
            admin.close()
        assert features["transaction.version"]["finalized"] == (1, 1)
        assert features["transaction.version"]["finalized_epoch"] == 3
        assert features["metadata.version"]["finalized"] == (25, 25)
    finally:
        broker.stop()


def test_the_answer_follows_the_finalized_levels_listener_and_telemetry() -> None:
    """ApiVersions' lists are built once per listener, telemetry switch and finalized levels, not per
    connection; a change of any of them gives the new answer at once, and one answer's lists are
    its own (a caller changing them does not change the next answer)."""
    from types import SimpleNamespace

    import odradek.broker.handlers  # noqa: F401  (registers the handlers the answer lists)
    from odradek.broker.advertised import api_versions_response
    from odradek.broker.ports import FeaturesPort
    from odradek.cluster.metadata import MetadataImage

    metadata = SimpleNamespace(image=MetadataImage.empty("c"))

    def port(telemetry: bool = True) -> FeaturesPort:
        return FeaturesPort(metadata=metadata, features=None, inter_broker_listener="INTERNAL", telemetry=telemetry)  # type: ignore[arg-type]

    def keys(response: object) -> set[int]:
        return {k.api_key for k in response.api_keys}  # type: ignore[attr-defined]

    first = api_versions_response(0, port(), "CLIENT", 4)
    assert ApiKey.SHARE_FETCH in keys(first) and ApiKey.PUSH_TELEMETRY in keys(first)
    assert not keys(first) & ZK_ERA and keys(api_versions_response(0, port(), "INTERNAL", 4)) >= ZK_ERA
    first.api_keys.clear()
    first.finalized_features.clear()
    again = api_versions_response(0, port(), "CLIENT", 4)
    assert keys(again) == keys(api_versions_response(0, port(), "client", 4)) and ApiKey.SHARE_FETCH in keys(again)
    assert "share.version" in {f.name for f in again.finalized_features}
    assert ApiKey.PUSH_TELEMETRY not in keys(api_versions_response(0, port(telemetry=False), "CLIENT", 4))
    metadata.image = MetadataImage.empty("c").with_features({"share.version": 0, "group.version": 1}, 7)
    off = api_versions_response(0, port(), "CLIENT", 4)
    assert ApiKey.SHARE_FETCH not in keys(off) and ApiKey.CONSUMER_GROUP_HEARTBEAT in keys(off)
    assert {f.name for f in off.finalized_features} == {"group.version"} and off.finalized_features_epoch == 7
    assert api_versions_response(0, port(), "CLIENT", 2).finalized_features == []
