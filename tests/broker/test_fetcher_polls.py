"""The replica fetcher's long poll never outlasts a partition that still has to truncate.

A follower's fetcher long-polls its leader (``replica.fetch.wait.max.ms``); a partition the
leader refused at truncation (it had not applied its LeaderAndIsr yet) is retried after 10 ms.
If that retry falls due while the fetcher truncates other partitions, the poll that follows must
not park for the whole wait: the partition would not be fetched, and an ``acks=all`` write to it
would wait, for a minute with the settings below (a CI failure of
tests/cluster/test_follower_start.py). The leader here is a fake channel that records requests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from odradek.broker.fetcher import ReplicaFetcherManager
from odradek.broker.replica import ReplicaManager
from odradek.cluster.metadata import PartitionState
from odradek.config import BrokerConfig
from odradek.protocol.messages.fetch import FetchRequest, FetchResponse
from odradek.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from odradek.storage import LogConfig, LogManager

WAIT_MS = 60000


class _Leader:
    """Broker 2 as a follower's channel sees it: truncation answers come after ``epoch_delay``
    seconds; fetches are answered at once, empty, whatever their max wait."""

    def __init__(self, epoch_delay: float) -> None:
        self.epoch_delay = epoch_delay
        self.requests: list[Any] = []

    def channel(self, host: str, port: int, **_kw: Any) -> _Leader:
        return self

    async def request(self, req: Any, version: int, timeout: float | None = None) -> Any:
        self.requests.append(req)
        if isinstance(req, OffsetForLeaderEpochRequest):
            await asyncio.sleep(self.epoch_delay)
            return OffsetForLeaderEpochResponse(topics=[
                OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
                    OffsetForLeaderEpochResponse.EpochEndOffset(
                        partition=p.partition, leader_epoch=p.leader_epoch, end_offset=0
                    )
                    for p in t.partitions
                ])
                for t in req.topics
            ])
        assert isinstance(req, FetchRequest)
        await asyncio.sleep(0)
        return FetchResponse(responses=[
            FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=[
                FetchResponse.PartitionData(partition_index=p.partition, high_watermark=0, records=b"")
                for p in t.partitions
            ])
            for t in req.topics
        ])

    async def close(self) -> None:
        return None


def _truncated(req: Any) -> set[str]:
    return {t.topic for t in req.topics} if isinstance(req, OffsetForLeaderEpochRequest) else set()


def test_a_partition_due_to_truncate_again_bounds_the_next_poll(tmp_path: Path) -> None:
    config = BrokerConfig({"replica.fetch.wait.max.ms": WAIT_MS, "replica.fetch.backoff.ms": WAIT_MS})
    rm = ReplicaManager(3, LogManager([tmp_path]), lambda _t: LogConfig.from_dict({}))
    parts = {}
    for topic in ("refused", "other"):
        parts[topic] = rm.make_follower(PartitionState(topic, 0, (2, 3), (2, 3), 2, 1, 1), None)
        parts[topic].log.start_epoch(1)
    leader = _Leader(epoch_delay=0.5)

    async def run() -> list[Any]:
        manager = ReplicaFetcherManager(3, config, rm, channel_factory=leader.channel)
        manager.add(parts["refused"], 2, "127.0.0.1", 1)
        manager.add(parts["other"], 2, "127.0.0.1", 1)
        # as if the leader had refused "refused" (it had not applied its LeaderAndIsr yet): its
        # retry falls due while "other" truncates (0.5 s), before the poll that follows
        (fetcher,) = manager.fetchers.values()
        fetcher.parts[("refused", 0)].delayed_until = asyncio.get_running_loop().time() + 0.2
        try:
            for _ in range(400):  # bounded: the fake answers fetches at once
                await asyncio.sleep(0.01)
                if any("refused" in _truncated(r) for r in leader.requests):
                    break
        finally:
            await manager.shutdown()
        return list(leader.requests)

    requests = asyncio.run(run())
    assert _truncated(requests[0]) == {"other"}
    seen_refused_again = False
    for req in requests[1:]:
        if "refused" in _truncated(req):
            seen_refused_again = True
            break
        if isinstance(req, FetchRequest):
            # "refused" is still to truncate and its retry is due: this poll must not park
            assert req.max_wait_ms == 0, f"a fetch long-polled {req.max_wait_ms} ms with a truncation due"
    assert seen_refused_again, "the refused partition was never truncated"
    assert any(isinstance(r, FetchRequest) for r in requests)
