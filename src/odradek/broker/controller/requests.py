"""The controller's requests, built from its view of the cluster (the context, the live
brokers' registrations): LeaderAndIsr to the replicas of changed partitions, UpdateMetadata with
every live broker and partition, StopReplica for partitions a broker must drop.  No I/O: the
orchestrator hands what these build to the per-broker channels."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from odradek.cluster.controller import ControllerContext
from odradek.cluster.metadata import BrokerInfo
from odradek.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from odradek.protocol.messages.stop_replica import StopReplicaRequest
from odradek.protocol.messages.update_metadata import UpdateMetadataRequest

__all__ = [
    "LEADER_AND_ISR_VERSION",
    "STOP_REPLICA_VERSION",
    "UPDATE_METADATA_VERSION",
    "leader_and_isr_requests",
    "stop_replica_request",
    "update_metadata_requests",
]

LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
NO_LEADER = -1
TP = tuple[str, int]
_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def leader_and_isr_requests(
    controller_id: int,
    ctx: ControllerContext,
    brokers: Mapping[int, BrokerInfo],
    listener: str | None,
    tps: Iterable[TP],
    targets: Iterable[int] | None,
    *,
    is_new: bool = False,
) -> dict[int, LeaderAndIsrRequest]:
    """LeaderAndIsr for ``tps`` to their live replicas (or only to ``targets``), per broker."""
    per_broker: dict[int, dict[str, list[LeaderAndIsrRequest.LeaderAndIsrPartitionState]]] = {}
    only = None if targets is None else set(targets)
    for tp in tps:
        ta = ctx.topics.get(tp[0])
        li = ctx.states.get(tp)
        if ta is None or li is None or tp[0] in ctx.deleting:
            continue
        replicas = ta.replicas.get(tp[1], ())
        ps = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
            topic_name=tp[0],
            partition_index=tp[1],
            controller_epoch=li.controller_epoch,
            leader=li.leader,
            leader_epoch=li.leader_epoch,
            isr=list(li.isr),
            partition_epoch=li.zk_version,
            replicas=list(replicas),
            adding_replicas=list(ta.adding.get(tp[1], ())),
            removing_replicas=list(ta.removing.get(tp[1], ())),
            is_new=is_new,
        )
        for r in replicas:
            if ctx.is_live(r) and (only is None or r in only):
                per_broker.setdefault(r, {}).setdefault(tp[0], []).append(ps)
    out = {}
    for bid, topics in per_broker.items():
        leaders = {ps.leader for parts in topics.values() for ps in parts if ps.leader >= 0}
        live_leaders = []
        for lid in sorted(leaders):
            info = brokers.get(lid)
            ep = None if info is None else (info.endpoint(listener) or info.endpoint())
            if ep is not None:
                live_leaders.append(LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=lid, host_name=ep.host, port=ep.port))
        out[bid] = LeaderAndIsrRequest(
            controller_id=controller_id,
            controller_epoch=ctx.epoch,
            broker_epoch=ctx.live_brokers.get(bid, -1),
            type=0,
            topic_states=[
                LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name=name,
                    topic_id=uuid.UUID(ctx.topics[name].topic_id),
                    partition_states=parts,
                )
                for name, parts in topics.items()
            ],
            live_leaders=live_leaders,
        )
    return out


def update_metadata_requests(
    controller_id: int, ctx: ControllerContext, brokers: Mapping[int, BrokerInfo], targets: Iterable[int]
) -> dict[int, UpdateMetadataRequest]:
    """UpdateMetadata for each target with every live broker and (always) every partition:
    brokers replace their image with it, so it stays simple and idempotent."""
    live = []
    for bid in sorted(ctx.live_brokers):
        info = brokers.get(bid)
        if info is None:
            continue
        live.append(
            UpdateMetadataRequest.UpdateMetadataBroker(
                id=bid,
                endpoints=[
                    UpdateMetadataRequest.UpdateMetadataEndpoint(
                        port=e.port, host=e.host, listener=e.listener,
                        security_protocol=_PROTOCOL_IDS.get(e.security_protocol, 0),
                    )
                    for e in info.endpoints
                ],
                rack=info.rack,
            )
        )
    topic_states = []
    for name, ta in sorted(ctx.topics.items()):
        if name in ctx.deleting:
            continue
        parts = []
        for p in sorted(ta.replicas):
            li = ctx.states.get((name, p))
            if li is None:
                continue
            replicas = ta.replicas[p]
            parts.append(
                UpdateMetadataRequest.UpdateMetadataPartitionState(
                    topic_name=name,
                    partition_index=p,
                    controller_epoch=li.controller_epoch,
                    leader=li.leader if ctx.is_live(li.leader) else NO_LEADER,
                    leader_epoch=li.leader_epoch,
                    isr=list(li.isr),
                    zk_version=li.zk_version,
                    replicas=list(replicas),
                    offline_replicas=[r for r in replicas if not ctx.is_live(r)],
                )
            )
        topic_states.append(
            UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name=name, topic_id=uuid.UUID(ta.topic_id), partition_states=parts
            )
        )
    return {
        bid: UpdateMetadataRequest(
            controller_id=controller_id,
            controller_epoch=ctx.epoch,
            broker_epoch=ctx.live_brokers.get(bid, -1),
            topic_states=topic_states,
            live_brokers=live,
        )
        for bid in targets
    }


def stop_replica_request(
    controller_id: int, ctx: ControllerContext, bid: int, tps: Iterable[TP], *, delete: bool
) -> StopReplicaRequest:
    topics: dict[str, list[StopReplicaRequest.StopReplicaPartitionState]] = {}
    for tp in tps:
        li = ctx.states.get(tp)
        topics.setdefault(tp[0], []).append(
            StopReplicaRequest.StopReplicaPartitionState(
                partition_index=tp[1], leader_epoch=-2 if delete else (li.leader_epoch if li else -1),
                delete_partition=delete,
            )
        )
    return StopReplicaRequest(
        controller_id=controller_id,
        controller_epoch=ctx.epoch,
        broker_epoch=ctx.live_brokers.get(bid, -1),
        topic_states=[
            StopReplicaRequest.StopReplicaTopicState(topic_name=t, partition_states=ps) for t, ps in topics.items()
        ],
    )
