"""Coordinator records a newer version wrote, in the upgrade fixture's data dir: a value version
this Odradek does not read fails its partition's load with one ERROR line (partition, offset,
record, versions) and the partition stays unavailable, its records kept; a record TYPE it does not
read is skipped with a WARN and the rest loads.  In ``_schemas`` a key of an unknown type or magic
is skipped with a WARN (as Confluent's registry does) and the other schemas are served."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import confluent_kafka as ck
import pytest

from odradek.broker.coordinators.groups import GroupShard
from odradek.broker.coordinators.record_versions import UnknownRecordVersionError
from odradek.broker.coordinators.runtime import CoordinatorRecord
from odradek.protocol.messages.coordinator import OffsetCommitKey, OffsetCommitValue, TransactionLogKey
from odradek.records import BatchBuilder
from odradek.schemas.store import RegistryState
from odradek.storage import LogManager
from odradek.testing import BrokerProcess, wait_for
from tests.registry.conftest import call
from tests.upgrade.test_upgrade_data_dir import WRITTEN_WITH, unpack

_short = struct.Struct(">h")


def offset_commit(group: str, topic: str, partition: int, offset: int, value_version: int) -> tuple[bytes, bytes]:
    key = _short.pack(1) + OffsetCommitKey(group=group, topic=topic, partition=partition).encode(1)
    value = OffsetCommitValue(offset=offset, leader_epoch=-1, metadata="", commit_timestamp=1).encode(3)
    return key, _short.pack(value_version) + value


def append(data: Path, topic: str, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
    """Append one batch of ``records`` to the partition's log offline; returns its first offset."""
    manager = LogManager([data], {"segment.bytes": 4096})
    try:
        log = manager.get(topic, partition)
        assert log is not None
        b = BatchBuilder()
        for key, value in records:
            b.append(1_000, key, value)
        return log.append(bytearray(b.build())).first_offset
    finally:
        manager.close()


def stored(data: Path, topic: str, partition: int) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((data / f"{topic}-{partition}").glob("*.log")))


def committed(broker: BrokerProcess, group: str, timeout: float) -> list[ck.TopicPartition]:
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        return list(c.committed([ck.TopicPartition("plain", 0), ck.TopicPartition("plain", 1)], timeout=timeout))
    finally:
        c.close()


def test_the_shard_refuses_an_offset_commit_value_version_it_does_not_read() -> None:
    from odradek.broker.coordinators.groups import _Retired
    from odradek.cluster.group import GroupLimits

    shard = GroupShard(0, GroupLimits(), _Retired())
    key, value = offset_commit("g", "t", 0, 5, 3)
    shard.replay(CoordinatorRecord(0, 0, key, value, -1, -1))
    key, value = offset_commit("g", "t", 0, 6, 9)
    with pytest.raises(UnknownRecordVersionError) as caught:
        shard.replay(CoordinatorRecord(1, 0, key, value, -1, -1))
    assert "OffsetCommitValue of value version 9, which this Odradek does not read (it reads versions 0-4)" in str(
        caught.value
    )


def test_an_unknown_value_version_keeps_the_group_partition_unavailable(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    # the fixture's group lives in __consumer_offsets-1 (2 partitions)
    first = append(data, "__consumer_offsets", 1, [offset_commit("fixture-group", "plain", 0, 99, 9)])
    before = stored(data, "__consumer_offsets", 1)
    broker = BrokerProcess(data, overrides=WRITTEN_WITH)
    broker.start()
    try:
        line = wait_for(
            lambda: next((s for s in broker.stderr_lines if "could not load __consumer_offsets-1" in s), None),
            30, "the load failure",
        )
        assert "ERROR" in line
        assert (
            f"the record at offset {first} is a OffsetCommitValue of value version 9, which this Odradek does not "
            "read (it reads versions 0-4): it was written by a newer Odradek"
        ) in line
        assert "Traceback" not in "".join(broker.stderr_lines)
        # not loaded with the offsets before the record, nor past it: unavailable
        with pytest.raises(ck.KafkaException):
            committed(broker, "fixture-group", 3)
    finally:
        broker.stop()
    assert stored(data, "__consumer_offsets", 1)[: len(before)] == before


def test_an_unknown_record_type_is_skipped_with_a_warning(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    append(data, "__consumer_offsets", 1, [(_short.pack(99) + b"future key", _short.pack(0) + b"future value")])
    append(data, "__transaction_state", 0, [(_short.pack(7) + b"future key", b"\x00\x00")])
    broker = BrokerProcess(data, overrides=WRITTEN_WITH)
    broker.start()
    try:
        offsets = committed(broker, "fixture-group", 30)
        assert [(tp.partition, tp.offset) for tp in offsets] == [(0, 17), (1, 23)]
        assert any("WARNING" in s and "__consumer_offsets-1: the record at offset" in s
                   and "record type 99, which this Odradek does not read" in s for s in broker.stderr_lines)
    finally:
        broker.stop()


def test_an_unknown_transaction_value_version_fails_the_load(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    key = _short.pack(0) + TransactionLogKey(transactional_id="future-txn").encode(0)
    first = append(data, "__transaction_state", 0, [(key, _short.pack(7) + b"\x00" * 40)])
    broker = BrokerProcess(data, overrides=WRITTEN_WITH)
    broker.start()
    try:
        line = wait_for(
            lambda: next((s for s in broker.stderr_lines if "could not load __transaction_state-0" in s), None),
            30, "the load failure",
        )
        assert f"the record at offset {first} is a TransactionLogValue of value version 7" in line
    finally:
        broker.stop()


def test_schemas_keys_of_an_unknown_type_or_magic_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    store = RegistryState()
    schema = json.dumps({"type": "string"})
    store.apply(b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}',
                json.dumps({"subject": "s", "version": 1, "id": 1, "schema": schema}).encode(), 0)
    store.apply(b'{"keytype":"SCHEMA","subject":"s","version":2,"magic":2}',
                json.dumps({"subject": "s", "version": 2, "id": 2, "schema": schema}).encode(), 1)
    store.apply(b'{"keytype":"FUTURE","magic":0}', b"{}", 2)
    assert store.skipped == 2 and list(store.subjects["s"]) == [1]
    text = caplog.text
    assert "offset 1 skipped: a SCHEMA key of magic 2, a format this Odradek does not read (it reads magic 0 and 1)" in text
    assert "offset 2 skipped: key type 'FUTURE' is not one Odradek's registry uses" in text


def test_the_fixture_registry_serves_after_an_unknown_key(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    append(data, "_schemas", 0, [(b'{"keytype":"FUTURE","magic":0}', b"{}")])
    broker = BrokerProcess(data, overrides=WRITTEN_WITH)
    broker.start()
    try:
        assert broker.registry_url is not None
        assert call("GET", f"{broker.registry_url}/subjects/fixture-value/versions/1").json["id"] == 1
    finally:
        broker.stop()
