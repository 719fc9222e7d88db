"""The generator merges Kafka 3.x's and Kafka 4.x's definitions into one class per message, every
version encoded exactly as the Kafka version that defines it says.

The oracles are the generator's output from each Kafka version's definitions alone, imported
under other package names: a message built at version ``v`` from the class of the Kafka version
that defines ``v`` (4.x where it defines it, else 3.x) is encoded by that class, decoded and
re-encoded by Odradek's merged class (same bytes), and decoded back by the oracle (same message).
Where both define a version, a 3.x message also passes through the merged class unchanged (Kafka
4 only added tagged fields to existing versions)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings

from odradek.protocol._schema import Data, Message
from tools.codegen.__main__ import generate
from tools.codegen.merge import MergeError, merge

from ._strategies import message_of
from .test_roundtrip import CLASSES

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference"
EXAMPLES = 4 if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else 15
#: unknown tagged fields of 3.x messages in versions both define get tags Kafka 4 does not use
FAR_TAGS = 1000
#: versions both define whose layout Kafka changed in place: KIP-932 share groups were early
#: access in 3.x, their v0 not released (Kafka 4 added LeaderEpoch / MetadataHash to v0)
CHANGED_IN_PLACE = {("ReadShareGroupStateSummaryResponse", 0), ("ShareGroupMetadataValue", 0)}


@pytest.fixture(scope="module")
def oracles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModuleType]:
    """The generator's output from Kafka 3.x's definitions alone (``k3``) and 4.x's alone (``k4``)."""
    root = tmp_path_factory.mktemp("oracles")
    sys.path.insert(0, str(root))
    try:
        packages = {}
        for name, directory in (("odr_oracle_k3", "kafka-protocol"), ("odr_oracle_k4", "kafka-protocol-4x")):
            files = generate([REFERENCE / directory / "messages", REFERENCE / directory / "coordinator-records"])
            for fname, text in files.items():
                path = root / name / fname
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text.replace("odradek.protocol.messages", name))
            packages[name[-2:]] = importlib.import_module(name)
        yield packages  # type: ignore[misc]
    finally:
        sys.path.remove(str(root))


def _twin(package: ModuleType, cls: type[Data]) -> type[Data] | None:
    """The class of ``package`` for the same message as ``cls`` (by API key for requests and
    responses: Kafka 4 renamed one), or None when that Kafka version has none."""
    if issubclass(cls, Message):
        if cls.API_KEY not in package.API_MODULES:
            return None
        twin: type[Data] = package.request_class(cls.API_KEY) if cls.TYPE == "request" else package.response_class(cls.API_KEY)
        return twin
    for module in ("headers", "coordinator", "data"):
        mod = importlib.import_module(f"{package.__name__}.{module}")
        found = getattr(mod, cls.NAME, None)
        if found is not None:
            return found  # type: ignore[no-any-return]
    return None


def _defines(cls: type[Data] | None, version: int) -> bool:
    return cls is not None and cls.VALID_VERSIONS[0] <= version <= cls.VALID_VERSIONS[1]


CASES = [
    pytest.param(cls, v, id=f"{cls.NAME}-v{v}")
    for cls in CLASSES
    for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)
]


def _through_merged(cls: type[Data], oracle: type[Data], version: int, unknown_from: int = 0) -> None:
    @settings(max_examples=EXAMPLES)
    @given(message_of(oracle, version, unknown_from))
    def check(msg: Any) -> None:
        data = msg.encode(version)
        merged = cls.decode(data, version)
        again = merged.encode(version)
        assert again == data
        assert oracle.decode(again, version) == msg

    check()


@pytest.mark.parametrize(("cls", "version"), CASES)
def test_every_version_is_encoded_as_its_kafka_version_defines_it(
    oracles: dict[str, ModuleType], cls: type[Data], version: int
) -> None:
    k3, k4 = _twin(oracles["k3"], cls), _twin(oracles["k4"], cls)
    assert _defines(k3, version) or _defines(k4, version), "a version neither Kafka version defines"
    defining = k4 if _defines(k4, version) else k3
    assert defining is not None
    assert cls.is_flexible(version) == defining.is_flexible(version)
    _through_merged(cls, defining, version)
    if defining is k4 and k3 is not None and _defines(k3, version) and (cls.NAME, version) not in CHANGED_IN_PLACE:
        # the bytes of Odradek's 3.x-generated classes are unchanged in versions both define
        _through_merged(cls, k3, version, FAR_TAGS)


def test_every_class_of_either_kafka_version_is_generated(oracles: dict[str, ModuleType]) -> None:
    for key in set(oracles["k3"].API_MODULES) | set(oracles["k4"].API_MODULES):
        from odradek.protocol.messages import API_MODULES

        assert key in API_MODULES


def test_the_classic_range_and_kafka_4_versions_are_both_there() -> None:
    from odradek.protocol.messages.coordinator import (
        ConsumerGroupMemberMetadataKey,
        GroupMetadataKey,
        LegacyOffsetCommitKey,
        OffsetCommitKey,
        TransactionLogValue,
    )
    from odradek.protocol.messages.list_offsets import ListOffsetsRequest
    from odradek.protocol.messages.offset_commit import OffsetCommitRequest
    from odradek.protocol.messages.produce import ProduceRequest

    assert ProduceRequest.VALID_VERSIONS == (0, 13)
    assert ListOffsetsRequest.VALID_VERSIONS == (0, 11)
    fields = {f.attr: f.versions for f in ListOffsetsRequest.ListOffsetsPartition._fields_}
    assert fields["max_num_offsets"] == (0, 0)  # removed by Kafka 4 (KIP-896), kept for v0
    assert {f.attr: f.versions for f in OffsetCommitRequest.OffsetCommitRequestPartition._fields_}[
        "commit_timestamp"
    ] == (1, 1)
    topic = {f.attr: f.versions for f in ProduceRequest.TopicProduceData._fields_}
    assert topic["name"] == (0, 12) and topic["topic_id"][0] == 13
    # coordinator keys keep their record type as their version
    assert GroupMetadataKey.VALID_VERSIONS == (2, 2)
    assert OffsetCommitKey.VALID_VERSIONS == (0, 1)
    assert LegacyOffsetCommitKey.VALID_VERSIONS == (0, 0)
    assert ConsumerGroupMemberMetadataKey.VALID_VERSIONS == (5, 5)
    assert "client_transaction_version" in {f.attr for f in TransactionLogValue._fields_}


# ---------------------------------------------------------------------------- merge() itself


def _msg(valid: str, fields: list[dict[str, Any]], flexible: str = "none") -> dict[str, Any]:
    return {"type": "request", "apiKey": 99, "name": "XRequest", "validVersions": valid,
            "flexibleVersions": flexible, "fields": fields}


def test_a_field_only_removed_versions_carried_keeps_those_versions_and_its_place() -> None:
    old = _msg("0-3", [{"name": "A", "type": "int32", "versions": "0+"},
                       {"name": "Gone", "type": "int64", "versions": "0-1"},
                       {"name": "B", "type": "string", "versions": "0+"}])
    new = _msg("2-5", [{"name": "A", "type": "int32", "versions": "0+"},
                       {"name": "B", "type": "string", "versions": "0+", "nullableVersions": "4+"},
                       {"name": "C", "type": "int8", "versions": "5+"}], flexible="4+")
    m = merge(old, new)
    assert m["validVersions"] == "0-5" and m["flexibleVersions"] == "4+"
    assert [(f["name"], f["versions"]) for f in m["fields"]] == [("A", "0+"), ("Gone", "0-1"), ("B", "0+"), ("C", "5+")]
    assert m["fields"][2]["nullableVersions"] == "4+"


def test_what_versions_cannot_tell_apart_must_agree() -> None:
    old = _msg("0-3", [{"name": "A", "type": "int32", "versions": "0+"}])
    with pytest.raises(MergeError, match="type differs"):
        merge(old, _msg("2-5", [{"name": "A", "type": "int64", "versions": "0+"}]))
    old2 = _msg("0-3", [{"name": "A", "type": "int32", "versions": "0+"}, {"name": "B", "type": "int8", "versions": "0+"}])
    with pytest.raises(MergeError, match="different orders"):
        merge(old2, _msg("2-5", [{"name": "B", "type": "int8", "versions": "0+"}, {"name": "A", "type": "int32", "versions": "0+"}]))
    # a field carried by the removed versions and again by new ones, but not in between
    old3 = _msg("0-3", [{"name": "A", "type": "int32", "versions": "0"}])
    with pytest.raises(MergeError, match="one range"):
        merge(old3, _msg("2-5", [{"name": "A", "type": "int32", "versions": "5+"}]))


def test_a_removed_api_leaves_the_older_definition() -> None:
    old = _msg("0-3", [{"name": "A", "type": "int32", "versions": "0+"}])
    assert merge(old, {**old, "validVersions": "none", "fields": []}) is old
