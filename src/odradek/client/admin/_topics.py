"""The cluster and its topics: describe, list, create, delete, add partitions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from odradek.client.admin._base import (
    AdminBase,
    _check,
    _cluster,
    _error,
    _Pending,
    _source,
    _topic_id,
)
from odradek.client.admin.types import (
    ClusterDescription,
    ConfigEntry,
    CreateTopicResult,
    NewPartitions,
    NewTopic,
    Node,
    PartitionDescription,
    TopicDescription,
    TopicListing,
    _config_text,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from odradek.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from odradek.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from odradek.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse


class TopicAdmin(AdminBase):
    """:class:`AsyncAdmin`'s cluster and topic operations: ``describe_cluster``, ``list_topics``,
    ``describe_topics``, ``create_topics``, ``delete_topics``, ``create_partitions``."""

    async def describe_cluster(self, *, timeout: float | None = None) -> ClusterDescription:
        """The cluster id, the controller and the brokers."""
        dl = self._deadline(timeout)
        state: _Pending[str, ClusterDescription] = _Pending({"cluster": None}, lambda _k: "describe cluster")

        async def attempt() -> None:
            conn = await self._node(None, dl)
            try:
                v = conn.version_for(DescribeClusterRequest)
            except KafkaError:
                md = await self._metadata([], dl)  # a broker without DescribeCluster
                brokers = [Node(b.node_id, b.host, b.port, b.rack) for b in md.brokers]
                state.done("cluster", _cluster(md.cluster_id, md.controller_id, brokers))
                return
            resp: DescribeClusterResponse = await self._request(conn, DescribeClusterRequest(endpoint_type=1), v, dl)
            if resp.error_code:
                state.fail("cluster", resp.error_code, resp.error_message)
                return
            brokers = [Node(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers]
            self._cluster.brokers = {b.id: (b.host, b.port) for b in brokers}
            self._cluster.controller_id = resp.controller_id
            state.done("cluster", _cluster(resp.cluster_id, resp.controller_id, brokers))

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return state.results["cluster"]

    # -- topics --------------------------------------------------------------------------------
    async def list_topics(self, include_internal: bool = False, *, timeout: float | None = None) -> dict[str, TopicListing]:
        """Every topic (internal ones such as ``__consumer_offsets`` only when asked), by name."""
        dl = self._deadline(timeout)
        state: _Pending[str, dict[str, TopicListing]] = _Pending({"topics": None}, lambda _k: "list topics")

        async def attempt() -> None:
            md = await self._metadata(None, dl)
            out = {}
            for t in sorted(md.topics, key=lambda t: t.name or ""):
                if t.name is None or (t.is_internal and not include_internal):
                    continue
                out[t.name] = TopicListing(t.name, _topic_id(t.topic_id), t.is_internal)
            state.done("topics", out)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return state.results["topics"]

    async def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions (leader, replicas, ISR), topic id and internal flag of each topic
        (of every topic when ``names`` is None)."""
        dl = self._deadline(timeout)
        wanted = None if names is None else list(dict.fromkeys([names] if isinstance(names, str) else names))
        state: _Pending[str, TopicDescription] = _Pending({n: None for n in wanted or ()}, lambda n: f"topic '{n}'")
        if wanted is None:
            state.todo["*"] = None

        async def attempt() -> None:
            asked = list(state.todo)
            md = await self._metadata(None if wanted is None else asked, dl)
            state.todo.pop("*", None)
            seen = {t.name for t in md.topics if t.name is not None}
            for t in md.topics:
                if t.name is None:
                    continue
                if t.error_code:
                    if t.name in state.todo:
                        msg = "does not exist" if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None
                        state.fail(t.name, t.error_code, msg)
                    continue
                if wanted is not None and t.name not in state.todo:
                    continue
                parts = [
                    PartitionDescription(
                        p.partition_index,
                        p.leader_id,
                        p.leader_epoch,
                        list(p.replica_nodes),
                        list(p.isr_nodes),
                        list(p.offline_replicas),
                        _error(p.error_code, f"partition {t.name}-{p.partition_index}") if p.error_code else None,
                    )
                    for p in sorted(t.partitions, key=lambda p: p.partition_index)
                ]
                state.done(t.name, TopicDescription(t.name, _topic_id(t.topic_id), t.is_internal, parts))
            for name in asked:  # not in the response at all
                if name in state.todo and name not in seen:
                    state.fail(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "does not exist")

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        if wanted is None:
            return dict(sorted(state.results.items()))
        return {n: state.results[n] for n in wanted}

    async def create_topics(
        self, new_topics: Iterable[NewTopic], *, validate_only: bool = False, timeout: float | None = None
    ) -> dict[str, CreateTopicResult]:
        """Create topics; returns each topic's id, partition count, replication factor and
        configs (as far as the broker reports them).  ``validate_only`` checks without creating."""
        dl = self._deadline(timeout)
        topics = {t.name: t for t in new_topics}
        state: _Pending[str, CreateTopicResult] = _Pending(topics, lambda n: f"create topic '{n}'")
        Q = CreateTopicsRequest

        def creatable(t: NewTopic) -> CreateTopicsRequest.CreatableTopic:
            assignments = []
            if t.assignments is not None:
                items = t.assignments.items() if isinstance(t.assignments, Mapping) else enumerate(t.assignments)
                assignments = [Q.CreatableReplicaAssignment(partition_index=int(p), broker_ids=[int(b) for b in r]) for p, r in items]
            return Q.CreatableTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments=assignments,
                configs=[Q.CreatableTopicConfig(name=k, value=_config_text(v)) for k, v in t.configs.items()],
            )

        async def attempt() -> None:
            conn = await self._controller(dl)
            v = conn.version_for(Q)
            if validate_only and v < 1:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot validate topics (CreateTopics v0)")
            asked = list(state.todo)
            req = Q(topics=[creatable(state.todo[n]) for n in asked], timeout_ms=dl.remaining_ms(), validate_only=validate_only)
            resp: CreateTopicsResponse = await self._request(conn, req, v, dl)
            state.unanswered(asked, {r.name for r in resp.topics})
            for r in resp.topics:
                if r.name not in state.todo:
                    continue
                if r.error_code:
                    state.fail(r.name, r.error_code, r.error_message)
                    continue
                asked = state.todo[r.name]
                configs = {
                    c.name: ConfigEntry(
                        c.name, c.value, _source(c.config_source), c.read_only, c.is_sensitive
                    )
                    for c in (r.configs or [])
                }
                tid = _topic_id(r.topic_id)
                state.done(
                    r.name,
                    CreateTopicResult(
                        r.name,
                        tid,
                        r.num_partitions if v >= 5 else asked.num_partitions,
                        r.replication_factor if v >= 5 else asked.replication_factor,
                        configs,
                    ),
                )

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {n: state.results[n] for n in topics}

    async def delete_topics(self, names: Iterable[str], *, timeout: float | None = None) -> None:
        """Delete topics (with their data)."""
        dl = self._deadline(timeout)
        wanted = list(dict.fromkeys([names] if isinstance(names, str) else names))
        state: _Pending[str, None] = _Pending({n: None for n in wanted}, lambda n: f"delete topic '{n}'")
        Q = DeleteTopicsRequest

        async def attempt() -> None:
            conn = await self._controller(dl)
            v = conn.version_for(Q)
            todo = list(state.todo)
            if v >= 6:
                req = Q(topics=[Q.DeleteTopicState(name=n) for n in todo], timeout_ms=dl.remaining_ms())
            else:
                req = Q(topic_names=todo, timeout_ms=dl.remaining_ms())
            resp: DeleteTopicsResponse = await self._request(conn, req, v, dl)
            state.unanswered(todo, {r.name for r in resp.responses if r.name is not None})
            for r in resp.responses:
                if r.name not in state.todo:
                    continue
                if r.error_code:
                    msg = r.error_message
                    if r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not msg:
                        msg = "the topic does not exist"
                    state.fail(r.name, r.error_code, msg)
                else:
                    state.done(r.name, None)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    async def create_partitions(
        self,
        new_partitions: Mapping[str, int | NewPartitions],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Raise topics' partition counts: ``{"orders": 6}`` (the new total, not the increase)."""
        dl = self._deadline(timeout)
        wanted = {t: (n if isinstance(n, NewPartitions) else NewPartitions(int(n))) for t, n in new_partitions.items()}
        state: _Pending[str, None] = _Pending(wanted, lambda n: f"create partitions of '{n}'")
        Q = CreatePartitionsRequest

        async def attempt() -> None:
            conn = await self._controller(dl)
            v = conn.version_for(Q)
            asked = list(state.todo)
            req = Q(
                topics=[
                    Q.CreatePartitionsTopic(
                        name=name,
                        count=np.total_count,
                        assignments=None
                        if np.assignments is None
                        else [Q.CreatePartitionsAssignment(broker_ids=[int(b) for b in a]) for a in np.assignments],
                    )
                    for name, np in state.todo.items()
                ],
                timeout_ms=dl.remaining_ms(),
                validate_only=validate_only,
            )
            resp: CreatePartitionsResponse = await self._request(conn, req, v, dl)
            state.unanswered(asked, {r.name for r in resp.results})
            for r in resp.results:
                if r.name not in state.todo:
                    continue
                if r.error_code:
                    state.fail(r.name, r.error_code, r.error_message)
                else:
                    state.done(r.name, None)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
