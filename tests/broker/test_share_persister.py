"""The persister's way to a share coordinator on another broker: the RPC over the inter-broker
channel, retried past NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / a broken connection until
its deadline, and any other error raised at once."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from odradek._clock import SystemClock
from odradek._scheduler import LoopScheduler
from odradek.broker.share_persister import PersistedState, SharePersister
from odradek.cluster.share_state import ShareKey, StateBatch
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.read_share_group_state import ReadShareGroupStateResponse
from odradek.protocol.messages.write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)

TID = uuid.UUID(int=42)


@dataclass
class _Endpoint:
    host: str = "127.0.0.1"
    port: int = 9


class _Broker:
    def endpoint(self, listener: str | None = None) -> _Endpoint:
        return _Endpoint()


@dataclass
class _State:
    leader: int


class _Image:
    brokers = {2: _Broker()}

    def partition(self, topic: str, p: int) -> _State:
        return _State(leader=2)


class _Coordinator:
    """This broker's share coordinator: it leads nothing here."""

    async def ensure_topic(self) -> None:
        return None

    def partition_of(self, key: ShareKey) -> int:
        return 0


@dataclass
class _Channel:
    answers: list[Any]
    sent: list[tuple[Any, int]] = field(default_factory=list)
    closed: bool = False

    async def request(self, message: Any, version: int) -> Any:
        self.sent.append((message, version))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def close(self) -> None:
        self.closed = True


def _persister(channels: list[_Channel], timeout_ms: int = 5000) -> SharePersister:
    made = iter(channels)
    return SharePersister(
        1, _Coordinator(), _Image, LoopScheduler(SystemClock()),  # type: ignore[arg-type]
        channel_factory=lambda *a, **k: next(made),  # type: ignore[arg-type]
        request_timeout_ms=timeout_ms,
    )


def _read_answer(code: ErrorCode, start: int = -1, batches: list[tuple[int, int, int, int]] | None = None) -> Any:
    R = ReadShareGroupStateResponse
    return R(results=[R.ReadStateResult(topic_id=TID, partitions=[R.PartitionResult(
        partition=3, error_code=int(code), state_epoch=1, start_offset=start,
        state_batches=[R.StateBatch(first_offset=f, last_offset=lo, delivery_state=s, delivery_count=c)
                       for f, lo, s, c in batches or []],
    )])])


def _write_answer(code: ErrorCode) -> Any:
    R = WriteShareGroupStateResponse
    return R(results=[R.WriteStateResult(topic_id=TID, partitions=[R.PartitionResult(partition=3, error_code=int(code))])])


def test_a_read_is_retried_past_not_coordinator_and_a_broken_connection() -> None:
    broken = _Channel([ConnectionResetError("gone")])
    ch = _Channel([_read_answer(ErrorCode.NOT_COORDINATOR), _read_answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                   _read_answer(ErrorCode.NONE, 5, [(5, 9, 2, 1)])])
    p = _persister([broken, ch])

    got = asyncio.run(p.read("g", TID, 3, leader_epoch=4))
    assert got == PersistedState(1, 5, (StateBatch(5, 9, 1, 2),))
    assert len(broken.sent) == 1  # dropped after the failure: the retries went on a new channel
    assert len(ch.sent) == 3
    req = ch.sent[0][0]
    assert req.group_id == "g" and req.topics[0].topic_id == TID
    assert req.topics[0].partitions[0].partition == 3 and req.topics[0].partitions[0].leader_epoch == 4


def test_a_never_initialized_share_partition_reads_none() -> None:
    assert asyncio.run(_persister([_Channel([_read_answer(ErrorCode.NONE)])]).read("g", TID, 3)) is None


def test_fencing_is_raised_at_once_and_the_write_carries_the_batches() -> None:
    ch = _Channel([_write_answer(ErrorCode.FENCED_STATE_EPOCH)])
    with pytest.raises(KafkaError) as failed:
        asyncio.run(_persister([ch]).write("g", TID, 3, leader_epoch=2, state_epoch=1, start_offset=7,
                                           batches=[StateBatch(7, 9, 3, 4)]))
    assert failed.value.code == ErrorCode.FENCED_STATE_EPOCH
    assert len(ch.sent) == 1
    req: WriteShareGroupStateRequest = ch.sent[0][0]
    part = req.topics[0].partitions[0]
    assert (part.leader_epoch, part.state_epoch, part.start_offset) == (2, 1, 7)
    b = part.state_batches[0]
    assert (b.first_offset, b.last_offset, b.delivery_count, b.delivery_state) == (7, 9, 3, 4)


def test_retries_end_at_the_deadline() -> None:
    ch = _Channel([_write_answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)])
    with pytest.raises(KafkaError) as failed:
        asyncio.run(_persister([ch], timeout_ms=300).write("g", TID, 3, leader_epoch=0, state_epoch=0,
                                                           start_offset=0, batches=[]))
    assert failed.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert 2 <= len(ch.sent) <= 10  # backed off, not spinning
