"""The partitions a request may use: led here, existing, readable.

Produce and fetch (and ListOffsets, OffsetForLeaderEpoch) ask for a partition here: a missing
topic or partition is UNKNOWN_TOPIC_OR_PARTITION, one led by another broker
NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata), an internal topic refuses client
writes, an offline log dir serves nothing, and a fetch's leader epoch is checked against the
partition's (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).
"""

from __future__ import annotations

from odradek.broker.replica import Partition, ReplicaManager
from odradek.broker.replication import Replication
from odradek.coordination import MetadataBackend
from odradek.errors import ErrorCode, KafkaError

__all__ = ["PartitionService"]


class PartitionService:
    def __init__(self, backend: MetadataBackend, replicas: ReplicaManager, replication: Replication) -> None:
        self.backend = backend
        self.replicas = replicas
        self.replication = replication

    def for_produce(self, topic: str, partition: int) -> Partition:
        info = self.backend.image.topics.get(topic)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{topic}' does not exist")
        if info.internal:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"clients may not write to the internal topic {topic}")
        if partition not in info.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {topic}-{partition} does not exist")
        return self._led_here(topic, partition)

    def for_fetch(self, topic: str, partition: int, current_leader_epoch: int, replica_id: int) -> Partition:
        if topic not in self.backend.image.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{topic}' does not exist")
        p = self._led_here(topic, partition)
        if self.replicas.log_dirs.any_failed:
            self.replicas.log_dirs.check_read(p.log_dir)  # an offline dir serves nothing
        if current_leader_epoch >= 0:
            if current_leader_epoch < p.leader_epoch:
                raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"epoch {current_leader_epoch} < {p.leader_epoch}")
            if current_leader_epoch > p.leader_epoch:
                raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"epoch {current_leader_epoch} > {p.leader_epoch}")
        return p

    def _led_here(self, topic: str, partition: int) -> Partition:
        """The partition this broker leads; NOT_LEADER_OR_FOLLOWER (the client refreshes its
        metadata) when the partition exists but lives on other brokers."""
        p = self.replicas.get(topic, partition)
        if p is None and self.replication.rehost(topic, partition) is None:
            state = self.backend.image.partition(topic, partition)
            if state is not None:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} is led by broker {state.leader}, not here"
                )
        return self.replicas.leader_partition(topic, partition)

    def on_follower_fetch(self, p: Partition, replica: int, fetch_offset: int) -> None:
        self.replication.on_follower_fetch(p, replica, fetch_offset)
