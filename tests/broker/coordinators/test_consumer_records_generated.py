"""The KIP-848 records the group coordinator writes (consumer_records, written field by field) read
back by the classes the code generator makes from Kafka 4's coordinator-record definitions (merged
with 3.x's): the same keys byte for byte, the same values field by field."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from odradek.broker.coordinators.consumer_records import decode_record, encode_record
from odradek.cluster.consumer_group import (
    ConsumerMember,
    GroupEpochRecord,
    MemberSubscriptionRecord,
    RegexRecord,
    ResolvedRegex,
    SubscriptionMetadataRecord,
    TargetEpochRecord,
    TopicMetadata,
)
from odradek.protocol.messages import coordinator as gen

MEMBER = ConsumerMember(
    member_id="m-1", instance_id="i-1", rack_id="r1", client_id="c", client_host="/127.0.0.1",
    subscribed_topic_names=("a", "b"), subscribed_topic_regex="^x.*", rebalance_timeout_ms=45000,
    server_assignor="uniform",
)
TOPIC_ID = uuid.UUID(int=7)

CASES: list[tuple[Any, int, Any, dict[str, Any], dict[str, Any]]] = [
    (GroupEpochRecord("g", 4), 3, gen.ConsumerGroupMetadataKey, {"group_id": "g"}, {"epoch": 4}),
    (TargetEpochRecord("g", 6), 6, gen.ConsumerGroupTargetAssignmentMetadataKey, {"group_id": "g"},
     {"assignment_epoch": 6}),
    (MemberSubscriptionRecord("g", "m-1", MEMBER), 5, gen.ConsumerGroupMemberMetadataKey,
     {"group_id": "g", "member_id": "m-1"},
     {"instance_id": "i-1", "rack_id": "r1", "client_id": "c", "client_host": "/127.0.0.1",
      "subscribed_topic_names": ["a", "b"], "subscribed_topic_regex": "^x.*", "rebalance_timeout_ms": 45000,
      "server_assignor": "uniform"}),
    (RegexRecord("g", "^x.*", ResolvedRegex(frozenset({"x1", "x2"}), 3, 1000)), 16,
     gen.ConsumerGroupRegularExpressionKey, {"group_id": "g", "regular_expression": "^x.*"},
     {"version": 3, "timestamp": 1000}),
    (SubscriptionMetadataRecord("g", (TopicMetadata(TOPIC_ID, "a", 3),)), 4, gen.ConsumerGroupPartitionMetadataKey,
     {"group_id": "g"}, {}),
]


@pytest.mark.parametrize(("record", "record_type", "key_cls", "key_fields", "value_fields"), CASES,
                         ids=[type(c[0]).__name__ for c in CASES])
def test_a_record_is_read_by_the_generated_classes(
    record: Any, record_type: int, key_cls: Any, key_fields: dict[str, Any], value_fields: dict[str, Any]
) -> None:
    key, value = encode_record(record)
    assert key == struct.pack(">h", record_type) + key_cls(**key_fields).encode(record_type)
    assert value is not None
    (version,) = struct.unpack_from(">h", value)
    value_cls = getattr(gen, key_cls.__name__[:-3] + "Value")
    decoded = value_cls.decode(value[2:], version)
    for name, expected in value_fields.items():
        assert getattr(decoded, name) == expected, name
    # and what the generated classes write is read back as the same record
    assert decode_record(key, struct.pack(">h", version) + decoded.encode(version)) == record
    # a tombstone has the same key and no value
    tomb_key, tomb = encode_record(type(record)(*[getattr(record, f) for f in record.__slots__[:-1]], None))
    assert (tomb_key, tomb) == (key, None)
