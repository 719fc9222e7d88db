"""Partition offsets and records: list offsets, delete records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odradek.client.admin._base import (
    _OFFSET_SPECS,
    MAX_TIMESTAMP,
    AdminBase,
    _check,
    _Pending,
)
from odradek.client.admin.types import (
    ListOffsetsResultInfo,
    TopicPartition,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from odradek.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from odradek.transport import AsyncBrokerConnection


class RecordAdmin(AdminBase):
    """:class:`AsyncAdmin`'s partition operations, sent to each partition's leader: ``list_offsets`` and
    ``delete_records``."""

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        isolation_level: str = "read_uncommitted",
        timeout: float | None = None,
    ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        """Offsets of partitions: ``"earliest"`` (log start), ``"latest"`` (the high watermark, or
        the last stable offset with ``read_committed``), ``"max_timestamp"`` (the record with the
        largest timestamp) or a timestamp in ms (the first offset whose timestamp is at or after
        it; offset -1 when there is none).  Returns ``(offset, timestamp, leader_epoch)`` each."""
        dl = self._deadline(timeout)
        wanted: dict[TopicPartition, int] = {}
        for (topic, partition), spec in specs.items():
            if isinstance(spec, str):
                if spec.lower() not in _OFFSET_SPECS:
                    raise ValueError(f"offset spec must be earliest, latest, max_timestamp or a timestamp, not {spec!r}")
                wanted[(topic, int(partition))] = _OFFSET_SPECS[spec.lower()]
            else:
                wanted[(topic, int(partition))] = int(spec)
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation_level must be read_uncommitted or read_committed, not {isolation_level!r}")
        isolation = 1 if isolation_level == "read_committed" else 0
        state: _Pending[TopicPartition, ListOffsetsResultInfo] = _Pending(wanted, lambda tp: f"list offsets of {tp[0]}-{tp[1]}")
        Q = ListOffsetsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            if v < 1:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker only has ListOffsets v0")
            if v < 7 and any(state.todo[tp] == MAX_TIMESTAMP for tp in batch):
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot look up max_timestamp (ListOffsets < v7)")
            by_topic: dict[str, list[Any]] = {}
            for topic, partition in batch:
                by_topic.setdefault(topic, []).append(
                    Q.ListOffsetsPartition(partition_index=partition, timestamp=state.todo[(topic, partition)])
                )
            req = Q(
                replica_id=-1,
                isolation_level=isolation,
                topics=[Q.ListOffsetsTopic(name=n, partitions=ps) for n, ps in by_topic.items()],
                timeout_ms=dl.remaining_ms(),
            )
            resp: ListOffsetsResponse = await self._request(conn, req, v, dl)
            state.unanswered(batch, {(t.name, p.partition_index) for t in resp.topics for p in t.partitions})
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if tp not in state.todo:
                        continue
                    if p.error_code:
                        state.fail(tp, p.error_code)
                    else:
                        state.done(tp, ListOffsetsResultInfo(p.offset, p.timestamp, p.leader_epoch if v >= 4 else -1))

        async def attempt() -> None:
            await self._per_node(state, await self._leaders(state, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {tp: state.results[tp] for tp in wanted}

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """Delete the records of each partition before an offset (-1: up to the high watermark);
        returns each partition's new low watermark (its log start offset)."""
        dl = self._deadline(timeout)
        wanted = {(t, int(p)): int(o) for (t, p), o in before.items()}
        state: _Pending[TopicPartition, int] = _Pending(wanted, lambda tp: f"delete records of {tp[0]}-{tp[1]}")
        Q = DeleteRecordsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartition]) -> None:
            v = conn.version_for(Q)
            by_topic: dict[str, list[Any]] = {}
            for topic, partition in batch:
                by_topic.setdefault(topic, []).append(
                    Q.DeleteRecordsPartition(partition_index=partition, offset=state.todo[(topic, partition)])
                )
            req = Q(
                topics=[Q.DeleteRecordsTopic(name=n, partitions=ps) for n, ps in by_topic.items()],
                timeout_ms=dl.remaining_ms(),
            )
            resp: DeleteRecordsResponse = await self._request(conn, req, v, dl)
            state.unanswered(batch, {(t.name, p.partition_index) for t in resp.topics for p in t.partitions})
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if tp not in state.todo:
                        continue
                    if p.error_code:
                        msg = None
                        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                            msg = f"offset {state.todo[tp]} is beyond the high watermark"
                        state.fail(tp, p.error_code, msg)
                    else:
                        state.done(tp, p.low_watermark)

        async def attempt() -> None:
            await self._per_node(state, await self._leaders(state, dl), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {tp: state.results[tp] for tp in wanted}
