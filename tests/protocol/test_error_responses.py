"""The answer to a request that failed (Kafka's getErrorResponse), for every API at every
version: it encodes, carries the error everywhere it belongs, and names what the request named."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.errors import ErrorCode
from odradek.protocol import RequestHeader, error_response, request_class, response_class
from odradek.protocol._schema import INT16, Struct
from odradek.protocol.messages import API_MODULES

from ._named import in_versions, named
from ._strategies import message_of

CODE = ErrorCode.POLICY_VIOLATION

CASES = [
    (key, v)
    for key in sorted(API_MODULES)
    for v in range(request_class(key).VALID_VERSIONS[0], request_class(key).VALID_VERSIONS[1] + 1)
]
IDS = [f"{request_class(k).NAME[:-7]}-v{v}" for k, v in CASES]
#: versions whose response can say nothing about a failure: no top-level error code, and items
#: the request does not name (Kafka answers these with an empty list too)
SILENT = {("DescribeLogDirs", v) for v in range(3)}


def _errors(obj: Any, version: int) -> list[tuple[Any, int]]:
    """Every (struct, error code) of a response, depth first."""
    found = []
    for f in type(obj)._fields_:
        if not in_versions(version, f.versions):
            continue
        value = getattr(obj, f.attr)
        if f.type is INT16 and f.attr.endswith("error_code"):
            found.append((obj, value))
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, Struct):
                    found += _errors(item, version)
        elif isinstance(value, Struct):
            found += _errors(value, version)
    return found


def _has_top_error(key: int, version: int) -> bool:
    return any(f.attr == "error_code" and in_versions(version, f.versions) for f in response_class(key)._fields_)


def answer(key: int, version: int, request: Any, message: str | None = "refused") -> Any:
    header = RequestHeader(api_key=key, api_version=version, correlation_id=1, client_id="c")
    return error_response(header, request, CODE, message)


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_the_error_answer_encodes_and_carries_the_error(key: int, version: int) -> None:
    request = named(request_class(key), version)
    if key == 0:
        request.acks = -1
    resp = answer(key, version, request)
    assert type(resp) is response_class(key)
    data = resp.encode(version)  # the answer is valid at the request's version
    assert type(resp).decode(data, version) == resp
    errors = _errors(resp, version)
    assert all(code in (CODE, 0) for _obj, code in errors)
    carried = [obj for obj, code in errors if code == CODE]
    if _has_top_error(key, version):
        assert resp.error_code == CODE
    elif (request_class(key).NAME[:-7], version) in SILENT:
        assert not errors
    else:
        assert carried, "no item of the answer carries the error"


@settings(max_examples=2)
@given(st.sampled_from(CASES).flatmap(lambda c: st.tuples(st.just(c), message_of(request_class(c[0]), c[1]))))
def test_any_request_gets_an_error_answer_valid_at_its_version(case: tuple[tuple[int, int], Any]) -> None:
    (key, version), request = case
    resp = answer(key, version, request, None)
    if resp is None:
        assert key == 0 and request.acks == 0
        return
    assert type(resp).decode(resp.encode(version), version) == resp


def test_produce_answers_every_partition_by_topic_and_index() -> None:
    from odradek.protocol.messages.produce import ProduceRequest as P

    request = P(acks=1, topic_data=[
        P.TopicProduceData(name="a", partition_data=[P.PartitionProduceData(index=i) for i in (0, 3)]),
        P.TopicProduceData(name="b", partition_data=[P.PartitionProduceData(index=7)]),
    ])
    for version in (0, 8, 11):
        resp = answer(0, version, request)
        got = [(t.name, p.index, p.error_code) for t in resp.responses for p in t.partition_responses]
        assert got == [("a", 0, CODE), ("a", 3, CODE), ("b", 7, CODE)]
        assert resp.responses[0].partition_responses[0].error_message == ("refused" if version >= 8 else None)
    request.acks = 0
    assert answer(0, 11, request) is None  # Kafka closes the connection instead


def test_metadata_answers_each_topic_asked_and_none_for_all_topics() -> None:
    from odradek.protocol.messages.metadata import MetadataRequest as M

    named_topics = M(topics=[M.MetadataRequestTopic(name="x"), M.MetadataRequestTopic(name=None, topic_id=uuid.UUID(int=5))])
    resp = answer(3, 11, named_topics)
    assert [(t.name, t.topic_id, t.error_code, t.partitions) for t in resp.topics] == [
        ("x", uuid.UUID(int=0), CODE, []), ("", uuid.UUID(int=5), CODE, [])
    ]
    assert answer(3, 12, M(topics=None)).topics == []


def test_fetch_answers_per_partition_before_v13_and_at_the_top_from_v7() -> None:
    from odradek.protocol.messages.fetch import FetchRequest as F

    request = F(topics=[F.FetchTopic(topic="t", partitions=[F.FetchPartition(partition=p) for p in (1, 2)])])
    v4 = answer(1, 4, request)
    assert [(p.partition_index, p.error_code) for p in v4.responses[0].partitions] == [(1, CODE), (2, CODE)]
    v12 = answer(1, 12, request)
    assert v12.error_code == CODE and len(v12.responses[0].partitions) == 2
    v13 = answer(1, 13, request)
    assert v13.error_code == CODE and v13.responses == []


def test_items_nested_elsewhere_plain_values_and_positions_are_answered() -> None:
    from odradek.protocol.messages.alter_client_quotas import AlterClientQuotasRequest as Q
    from odradek.protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest as R
    from odradek.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest as U
    from odradek.protocol.messages.create_acls import CreateAclsRequest as A
    from odradek.protocol.messages.elect_leaders import ElectLeadersRequest as E

    dirs = R(dirs=[R.AlterReplicaLogDir(path=d, topics=[R.AlterReplicaLogDirTopic(name=f"{d}t", partitions=[0, 1])]) for d in "ab"])
    resp = answer(34, 1, dirs)  # topics nested in directories: answered per topic
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.results] == [
        ("at", [(0, CODE), (1, CODE)]), ("bt", [(0, CODE), (1, CODE)])
    ]
    elect = answer(43, 0, E(topic_partitions=[E.TopicPartitions(topic="t", partitions=[4, 5])]))
    assert [(r.partition_id, r.error_code) for r in elect.replica_election_results[0].partition_result] == [(4, CODE), (5, CODE)]
    assert answer(43, 0, E(topic_partitions=None)).replica_election_results == []
    acls = answer(30, 3, A(creations=[A.AclCreation(), A.AclCreation(), A.AclCreation()]))
    assert [(r.error_code, r.error_message) for r in acls.results] == [(CODE, "refused")] * 3
    scram = answer(51, 0, U(deletions=[U.ScramCredentialDeletion(name="u1")], upsertions=[U.ScramCredentialUpsertion(name="u2")]))
    assert [(r.user, r.error_code) for r in scram.results] == [("u1", CODE), ("u2", CODE)]
    quotas = answer(49, 1, Q(entries=[Q.EntryData(entity=[Q.EntityData(entity_type="user", entity_name="alice")])]))
    assert [(e.entity_type, e.entity_name) for e in quotas.entries[0].entity] == [("user", "alice")]
    assert quotas.entries[0].error_code == CODE


def test_unknown_values_keep_their_unknown_defaults() -> None:
    from odradek.protocol.messages.list_offsets import ListOffsetsRequest as L
    from odradek.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest as O

    lo = answer(2, 8, L(topics=[L.ListOffsetsTopic(name="t", partitions=[L.ListOffsetsPartition(partition_index=2, timestamp=55)])]))
    p = lo.topics[0].partitions[0]
    assert (p.partition_index, p.error_code, p.timestamp, p.offset, p.leader_epoch) == (2, CODE, -1, -1, -1)
    oe = answer(23, 4, O(topics=[O.OffsetForLeaderTopic(topic="t", partitions=[O.OffsetForLeaderPartition(partition=3, leader_epoch=9)])]))
    q = oe.topics[0].partitions[0]
    assert (q.partition, q.error_code, q.leader_epoch, q.end_offset) == (3, CODE, -1, -1)
