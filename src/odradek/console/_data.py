"""What the console's pages show, asked of the cluster: the Admin and SimpleConsumer calls behind
each page, with no HTML and no HTTP here (the pages turn a missing topic or group into a 404)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from odradek.client import (
    AdminError,
    AlterConfigOp,
    AsyncAdmin,
    AsyncSimpleConsumer,
    ConfigResource,
    NewTopic,
)
from odradek.client.admin import (
    ClientQuotaEntity,
    ConfigEntry,
    GroupDescription,
    ListOffsetsResultInfo,
    PartitionLag,
    TopicDescription,
)
from odradek.console._render import matches
from odradek.console._scrape import MetricsScraper
from odradek.console._throughput import ThroughputSampler
from odradek.errors import ErrorCode, KafkaError
from odradek.security.acl import AclBinding, AclBindingFilter

__all__ = ["FETCH_BYTES", "MAX_FETCHES", "MAX_SCANNED", "Browsed", "ClusterData", "ResetPlan", "Start"]

log = logging.getLogger("odradek.console")

TopicPartition = tuple[str, int]
#: the message browser's bounds: records scanned by a search, fetches per partition, bytes a fetch
MAX_SCANNED = 20_000
MAX_FETCHES = 200
FETCH_BYTES = 1024 * 1024

#: where a browse starts: the oldest or newest records, or an offset or a time (ms) given
Start = tuple[Literal["earliest", "latest"], None] | tuple[Literal["offset", "timestamp"], int]


@dataclass(frozen=True, slots=True)
class Browsed:
    """Records read from one partition: the ``records`` that match, the offset reading started
    at, the partition's log start and end, and how many records were looked at."""

    records: list[Any]  # the simple consumer's records (ConsumerRecord)
    start: int
    log_start: int
    log_end: int
    scanned: int


@dataclass(frozen=True, slots=True)
class ResetPlan:
    """A group's offsets before and after a reset: ``target`` (within each partition's log),
    the committed offsets, the log ends, and the group's state (only an inactive group may be
    reset)."""

    target: dict[TopicPartition, int]
    committed: Mapping[TopicPartition, Any]
    latest: Mapping[TopicPartition, ListOffsetsResultInfo]
    state: str


class ClusterData:
    """The console's one :class:`AsyncAdmin` and one :class:`AsyncSimpleConsumer`, and the
    sampler of throughput built on the Admin; every call bounded by ``timeout`` seconds."""

    def __init__(
        self, client_config: Mapping[str, Any], *, timeout: float, sample_interval: float,
        metrics_urls: list[str] | None = None,
    ) -> None:
        self.timeout = timeout
        ms = int(timeout * 1000)
        self.admin = AsyncAdmin({**client_config, "default.api.timeout.ms": ms, "request.timeout.ms": ms})
        self.consumer = AsyncSimpleConsumer(
            {**client_config, "request.timeout.ms": ms, "fetch.max.wait.ms": 100, "max.partition.fetch.bytes": FETCH_BYTES}
        )
        self.sampler = ThroughputSampler(self.admin, interval=sample_interval, timeout=timeout)
        #: the brokers' /metrics, for the brokers page
        self.scraper = MetricsScraper(list(metrics_urls or []), interval=sample_interval, timeout=timeout)

    # -- topics ----------------------------------------------------------------------------------
    async def offsets(self, specs: dict[TopicPartition, Any]) -> dict[TopicPartition, ListOffsetsResultInfo]:
        """Offsets of the partitions that answer (a partition without a leader shows none)."""
        if not specs:
            return {}
        try:
            return await self.admin.list_offsets(specs, timeout=self.timeout)
        except AdminError as exc:
            return exc.results

    async def log_ranges(
        self, tps: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, ListOffsetsResultInfo], dict[TopicPartition, ListOffsetsResultInfo]]:
        """(log start, log end) offsets of the partitions that answer."""
        earliest, latest = await asyncio.gather(
            self.offsets(dict.fromkeys(tps, "earliest")), self.offsets(dict.fromkeys(tps, "latest"))
        )
        return earliest, latest

    async def topic(self, name: str) -> TopicDescription | None:
        """Topic ``name``, or None when the cluster does not have it."""
        try:
            topics = await self.admin.describe_topics([name], timeout=self.timeout)
        except KafkaError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return None
            raise
        return topics.get(name)

    async def topics(self) -> dict[str, TopicDescription]:
        return await self.admin.describe_topics(None, timeout=self.timeout)

    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        await self.admin.create_topics([NewTopic(name, partitions, replication_factor, configs)], timeout=self.timeout)

    async def delete_topic(self, name: str) -> None:
        await self.admin.delete_topics([name], timeout=self.timeout)

    async def topic_configs(self, name: str) -> dict[str, ConfigEntry]:
        resource = ConfigResource("topic", name)
        return (await self.admin.describe_configs([resource], include_synonyms=False, timeout=self.timeout))[resource]

    async def many_topic_configs(self, names: list[str]) -> dict[str, dict[str, str | None]]:
        """The configs' values of several topics, in one request."""
        resources = [ConfigResource("topic", n) for n in names]
        found = await self.admin.describe_configs(resources, include_synonyms=False, timeout=self.timeout)
        return {r.name: {k: c.value for k, c in entries.items()} for r, entries in found.items()}

    async def alter_topic_config(self, name: str, change: AlterConfigOp) -> None:
        await self.admin.incremental_alter_configs({ConfigResource("topic", name): [change]}, timeout=self.timeout)

    # -- overview --------------------------------------------------------------------------------
    async def overview(self) -> dict[str, Any]:
        """The cluster in numbers (the overview page and ``/api/overview``)."""
        cluster, topics, groups = await asyncio.gather(
            self.admin.describe_cluster(timeout=self.timeout),
            self.admin.describe_topics(None, timeout=self.timeout),
            self.admin.list_groups(timeout=self.timeout),
        )
        partitions = [p for t in topics.values() for p in t.partitions]
        return {
            "cluster_id": cluster.cluster_id,
            "controller": cluster.controller_id,
            "brokers": [
                {"id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in sorted(cluster.brokers, key=lambda b: b.id)
            ],
            "topics": len([t for t in topics.values() if not t.internal]),
            "internal_topics": len([t for t in topics.values() if t.internal]),
            "partitions": len(partitions),
            "under_replicated": sum(1 for p in partitions if len(p.isr) < len(p.replicas)),
            "offline": sum(1 for p in partitions if p.leader < 0),
            "groups": len(groups),
            "leaders": {b.id: sum(1 for p in partitions if p.leader == b.id) for b in cluster.brokers},
        }

    # -- messages --------------------------------------------------------------------------------
    async def browse(self, topic: str, partition: int, start_at: Start, limit: int, needle: str) -> Browsed:
        """Up to ``limit`` records of one partition from ``start_at`` that match ``needle``
        (see :func:`~odradek.console._render.matches`), reading at most :data:`MAX_SCANNED`."""
        lo = await self.consumer.earliest_offset(topic, partition)
        hi = await self.consumer.latest_offset(topic, partition)
        where, value = start_at
        if where == "latest":
            start = max(lo, hi - limit)
        elif where == "offset":
            assert value is not None
            start = min(max(value, lo), hi)
        elif where == "timestamp":
            assert value is not None
            found = await self.consumer.offset_for_time(topic, partition, value)
            start = hi if found is None else max(found, lo)
        else:
            start = lo
        out: list[Any] = []
        offset = start
        scanned = 0
        for _ in range(MAX_FETCHES):
            if offset >= hi or len(out) >= limit or scanned >= MAX_SCANNED:
                break
            batch = await self.consumer.fetch(topic, partition, offset, FETCH_BYTES)
            for r in batch:
                if r.offset < offset or r.offset >= hi:
                    continue
                scanned += 1
                if matches(needle, r.key, r.value, r.headers):
                    out.append(r)
                    if len(out) >= limit:
                        break
            if batch.next_offset <= offset:
                break
            offset = batch.next_offset
        return Browsed(out[:limit], start, lo, hi, scanned)

    # -- consumer groups -------------------------------------------------------------------------
    async def groups(self) -> list[str]:
        """The ids of the cluster's groups, sorted."""
        listed = await self.admin.list_groups(timeout=self.timeout)
        return sorted(g.group_id for g in listed)

    async def group_summaries(
        self, ids: list[str]
    ) -> tuple[dict[str, GroupDescription], list[dict[TopicPartition, PartitionLag] | BaseException]]:
        """The groups described, and each one's lag (or what went wrong asking for it)."""
        if not ids:
            return {}, []
        limit = asyncio.Semaphore(8)  # a few groups' coordinators asked at a time

        async def lag_of(group_id: str) -> dict[TopicPartition, PartitionLag]:
            async with limit:
                return await self.admin.group_lag(group_id, timeout=self.timeout)

        described, lags = await asyncio.gather(
            self.admin.describe_groups(ids, timeout=self.timeout),
            asyncio.gather(*(lag_of(g) for g in ids), return_exceptions=True),
        )
        return described, lags

    async def group(
        self, group_id: str
    ) -> tuple[GroupDescription, dict[TopicPartition, PartitionLag], list[str]]:
        """A group described, its lag per partition, and the cluster's topics (for the reset form)."""
        described, lags, topics = await asyncio.gather(
            self.admin.describe_groups([group_id], timeout=self.timeout),
            self.admin.group_lag(group_id, timeout=self.timeout),
            self.admin.list_topics(timeout=self.timeout),
        )
        return described[group_id], lags, list(topics)

    # -- share groups ----------------------------------------------------------------------------
    async def share_groups(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The share groups described (at most 200), and each one's share-partition offsets (or
        what went wrong asking for them)."""
        ids = (await self.admin.list_share_groups(timeout=self.timeout))[:200]
        if not ids:
            return {}, {}
        limit = asyncio.Semaphore(8)

        async def offsets_of(group_id: str) -> Any:
            async with limit:
                return await self.admin.describe_share_group_offsets(group_id, timeout=self.timeout)

        described, offsets = await asyncio.gather(
            self.admin.describe_share_groups(ids, timeout=self.timeout),
            asyncio.gather(*(offsets_of(g) for g in ids), return_exceptions=True),
        )
        return described, dict(zip(ids, offsets))

    async def share_group(self, group_id: str) -> tuple[Any, Any] | None:
        """A share group described and its share-partition offsets; None when it does not exist."""
        try:
            described = await self.admin.describe_share_groups([group_id], timeout=self.timeout)
        except KafkaError as exc:
            if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
                return None
            raise
        return described[group_id], await self.admin.describe_share_group_offsets(group_id, timeout=self.timeout)

    async def reset_plan(
        self, group_id: str, tps: list[TopicPartition], strategy: str, value: int | None
    ) -> ResetPlan:
        """Where a reset of ``group_id``'s offsets of ``tps`` would put them: ``strategy``
        earliest, latest, offset (``value``), timestamp (``value`` ms) or shift (by ``value``
        from the committed offset, or from the log end when none)."""
        earliest, latest, committed, described = await asyncio.gather(
            self.admin.list_offsets(dict.fromkeys(tps, "earliest"), timeout=self.timeout),
            self.admin.list_offsets(dict.fromkeys(tps, "latest"), timeout=self.timeout),
            self.admin.list_group_offsets(group_id, tps, timeout=self.timeout),
            self.admin.describe_groups([group_id], timeout=self.timeout),
        )
        target: dict[TopicPartition, int] = {}
        if strategy == "earliest":
            target = {tp: earliest[tp].offset for tp in tps}
        elif strategy == "latest":
            target = {tp: latest[tp].offset for tp in tps}
        elif strategy == "offset":
            assert value is not None
            target = dict.fromkeys(tps, value)
        elif strategy == "timestamp":
            assert value is not None
            found = await self.admin.list_offsets(dict.fromkeys(tps, value), timeout=self.timeout)
            target = {tp: (found[tp].offset if found[tp].offset >= 0 else latest[tp].offset) for tp in tps}
        else:
            assert value is not None
            target = {tp: (committed[tp].offset if tp in committed else latest[tp].offset) + value for tp in tps}
        target = {tp: min(max(o, earliest[tp].offset), latest[tp].offset) for tp, o in target.items()}
        return ResetPlan(target, committed, latest, described[group_id].state)

    async def reset(self, group_id: str, target: dict[TopicPartition, int]) -> None:
        await self.admin.alter_group_offsets(group_id, target, timeout=self.timeout)

    # -- security ------------------------------------------------------------------------------
    async def acls(self) -> list[AclBinding]:
        return await self.admin.describe_acls(timeout=self.timeout)

    async def delete_acl(self, binding: AclBinding) -> None:
        b = binding
        await self.admin.delete_acls(
            [AclBindingFilter(b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation, b.permission)],
            timeout=self.timeout,
        )

    async def scram_users(self) -> dict[str, dict[str, int]]:
        return await self.admin.describe_user_scram_credentials(timeout=self.timeout)

    async def delete_scram_credential(self, user: str, mechanism: str) -> None:
        await self.admin.alter_user_scram_credentials(delete=[(user, mechanism)], timeout=self.timeout)

    async def client_quotas(self) -> dict[ClientQuotaEntity, dict[str, float]]:
        return await self.admin.describe_client_quotas(timeout=self.timeout)

    async def remove_client_quota(self, entity: ClientQuotaEntity, key: str) -> None:
        await self.admin.alter_client_quotas([(entity, {key: None})], timeout=self.timeout)

    # -- lifecycle -------------------------------------------------------------------------------
    async def close(self) -> None:
        """The sampler, the consumer and the Admin closed (each attempted)."""
        await self.sampler.close()
        await self.scraper.close()
        for closer in (self.consumer.close, self.admin.close):
            try:
                await closer()
            except Exception:  # closing anyway
                log.debug("console: close failed", exc_info=True)
