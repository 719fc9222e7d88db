"""The embedded single-node backend: this broker is the controller and leads every partition.

The image (topics, partition assignments, leader epochs, topic and broker config overrides) is
kept in ``cluster-metadata.json`` in the first log dir, rewritten atomically on every change, so
topics and their ids survive restarts.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from odradek.cluster.metadata import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from odradek.coordination.base import MetadataBackend, validate_topic_name
from odradek.errors import ErrorCode, KafkaError

__all__ = ["EmbeddedBackend"]

FILE_NAME = "cluster-metadata.json"


class EmbeddedBackend(MetadataBackend):
    def __init__(self, directory: Path, cluster_id: str) -> None:
        super().__init__()
        self.path = directory / FILE_NAME
        self.cluster_id = cluster_id
        self._image = MetadataImage.empty(cluster_id)
        self._broker_id = -1

    @property
    def image(self) -> MetadataImage:
        return self._image

    async def start(self, broker: BrokerInfo) -> None:
        self._broker_id = broker.broker_id
        if self.path.exists():
            data = json.loads(self.path.read_text())
            image = MetadataImage.from_json(data, controller_id=broker.broker_id)
            if image.cluster_id != self.cluster_id:
                raise KafkaError(
                    ErrorCode.INCONSISTENT_CLUSTER_ID,
                    f"{self.path} belongs to cluster {image.cluster_id}, not {self.cluster_id}",
                )
        else:
            image = MetadataImage.empty(self.cluster_id, broker.broker_id)
        # a single node leads everything; a restart is a new leader epoch for each partition
        topics = {}
        for name, t in image.topics.items():
            parts = {
                p: replace(s, leader=broker.broker_id, isr=(broker.broker_id,), leader_epoch=s.leader_epoch + 1)
                for p, s in t.partitions.items()
            }
            topics[name] = replace(t, partitions=parts)
        image = replace(image, topics=topics).with_broker(broker).with_controller(broker.broker_id)
        self._commit(image)

    async def stop(self) -> None:
        pass

    def _commit(self, image: MetadataImage) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            # one line through the C encoder (indent= would take json's pure-Python encoder,
            # which made this dump most of a topic creation's time at a few hundred topics)
            f.write(json.dumps(image.to_json(), sort_keys=True))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._image = image
        self._publish(image)

    def _state(self, topic: str, partition: int) -> PartitionState:
        b = self._broker_id
        return PartitionState(topic, partition, (b,), (b,), b, 0, 0)

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
        internal: bool = False,
    ) -> TopicInfo:
        validate_topic_name(name)
        if name in self._image.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
        if assignments:
            for p, replicas in assignments.items():
                if any(r != self._broker_id for r in replicas) or not replicas:
                    raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {p}: unknown broker in {replicas}")
            num_partitions = len(assignments)
        if num_partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "number of partitions must be larger than 0")
        if replication_factor <= 0 or replication_factor > 1:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} is larger than the 1 available broker"
                if replication_factor > 1
                else "replication factor must be larger than 0",
            )
        topic = TopicInfo(
            name,
            uuid.uuid4(),
            {p: self._state(name, p) for p in range(num_partitions)},
            dict(configs),
            internal,
        )
        if not validate_only:
            self._commit(self._image.with_topic(topic))
        return topic

    async def delete_topic(self, name: str) -> None:
        if name not in self._image.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        self._commit(self._image.without_topic(name))

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None = None, *, validate_only: bool = False
    ) -> None:
        topic = self._image.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        current = topic.partition_count
        if total <= current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic currently has {current} partitions, {total} would not be an increase",
            )
        if assignments is not None:
            if len(assignments) != total - current:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "one assignment is needed per new partition")
            for replicas in assignments:
                if not replicas or any(r != self._broker_id for r in replicas):
                    raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"unknown broker in {replicas}")
        if not validate_only:
            states = [self._state(name, p) for p in range(current, total)]
            self._commit(self._image.with_partitions(name, states))

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        if name not in self._image.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        self._commit(self._image.with_topic_configs(name, configs))

    async def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        self._commit(self._image.with_broker_configs(configs))
