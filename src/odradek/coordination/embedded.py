"""The embedded single-node backend: this broker is the controller and leads every partition.

The image (topics, partition assignments, leader epochs, topic and broker config overrides, and
the deletions whose partition directories may still be on disk) is kept in
``cluster-metadata.json`` in the first log dir, rewritten atomically on every change, so topics
and their ids survive restarts.  A change is answered once it is on disk; it is serialised from
cached per-topic JSON (only changed topics are encoded again) and written on a worker thread, one
change at a time, so that creating topics on a broker that has thousands does not hold the
event loop.

Metadata and data agree or the broker refuses to start: at start the image is checked against
the partition directories found in the log dirs (``on_disk``: topic id from each partition's
``partition.metadata``).  A missing file is rebuilt from them (topic, partition count, topic id;
topic configs cannot be recovered and say so in a WARN); partition directories of topics the
file does not know are adopted the same way; a directory whose topic id contradicts the file, or
a file that cannot be read, stops the start with a message naming the file and what to do.  The
backend never deletes anything: it records deletions (``MetadataImage.deleted_topics``), and the
broker deletes only the directories of those.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from odradek.cluster.metadata import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from odradek.coordination.base import AclEntry, MetadataBackend, validate_topic_name
from odradek.errors import ErrorCode, KafkaError
from odradek.storage.checkpoint import write_atomic

__all__ = ["EmbeddedBackend", "MetadataStoreError", "is_deleted", "read_cluster_id"]

FILE_NAME = "cluster-metadata.json"
#: the format of the file: its ``format_version`` key (absent in the files of earlier Odradek
#: versions, whose format is 1).  A file of another version is refused, not guessed at.
FORMAT_VERSION = 1

PRODUCER_ID_BLOCK = 1000
PRODUCER_ID_FILE = "producer-id-block"

log = logging.getLogger(__name__)

#: a topic rebuilt from its partition directories: its configs are lost, so nothing may be
#: deleted by retention until an operator sets them again
REBUILT_TOPIC_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1"}

#: (topic, partition) -> topic id in the partition's ``partition.metadata`` (None: no such file)
OnDisk = Mapping[tuple[str, int], "uuid.UUID | None"]


class MetadataStoreError(KafkaError):
    """The metadata store cannot be used as it is: the broker refuses to start (nothing deleted)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


def _problem(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"it is not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return f"it does not hold Odradek's metadata ({type(exc).__name__}: {exc})"


def _report_orphaned_failure(task: asyncio.Task[None]) -> None:
    """A metadata change whose caller was cancelled has ended: say so if it failed (no one else will)."""
    exc = None if task.cancelled() else task.exception()
    if exc is not None:
        log.warning("a metadata change whose requester went away failed: %s: %s", type(exc).__name__, exc)


def read_cluster_id(directory: Path) -> str | None:
    """The cluster id recorded in ``cluster-metadata.json`` (None if absent or unreadable)."""
    try:
        data = json.loads((directory / FILE_NAME).read_text())
        cid = data.get("cluster_id") if isinstance(data, dict) else None
        return cid if isinstance(cid, str) and cid else None
    except (OSError, ValueError):
        return None


def is_deleted(image: MetadataImage, topic: str, topic_id: uuid.UUID | None) -> bool:
    """Whether a partition directory of ``topic`` holding ``topic_id`` (None: no
    ``partition.metadata``) belongs to a deletion the image recorded, so it may be deleted."""
    if topic_id is not None:
        return image.deleted_topics.get(topic_id) == topic
    return topic not in image.topics and topic in image.deleted_topics.values()


class EmbeddedBackend(MetadataBackend):
    def __init__(
        self,
        directory: Path,
        cluster_id: str,
        *,
        on_disk: Callable[[], OnDisk] | None = None,
        internal_topics: Mapping[str, Mapping[str, str]] | None = None,
        clean_shutdown: Callable[[], bool] | None = None,
    ) -> None:
        """``clean_shutdown``: whether every log was closed cleanly last time (None: unknown)."""
        super().__init__()
        self.path = directory / FILE_NAME
        self.cluster_id = cluster_id
        self._image = MetadataImage.empty(cluster_id)
        self._broker_id = -1
        self._on_disk = on_disk
        self._clean_shutdown = clean_shutdown
        self._internal_topics = dict(internal_topics or {})
        #: one change at a time: computed from the current image, written, then published
        self._changing = asyncio.Lock()
        #: topic name -> (the TopicInfo, its JSON text): only changed topics are encoded again
        self._fragments: dict[str, tuple[TopicInfo, str]] = {}

    @property
    def image(self) -> MetadataImage:
        return self._image

    def _read(self, broker_id: int) -> MetadataImage | None:
        """The stored image, None if there is no file; MetadataStoreError if it cannot be used."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise self._unreadable(_problem(exc)) from None
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError("the top level is not an object")
            version = data.get("format_version", FORMAT_VERSION)
            if version != FORMAT_VERSION:
                raise MetadataStoreError(
                    f"the metadata store {self.path} has format_version {version!r}, which this Odradek does not "
                    f"read (it reads {FORMAT_VERSION}): it was written by a newer Odradek. Nothing was changed; "
                    "run the version that wrote it"
                )
            image = MetadataImage.from_json(data, controller_id=broker_id)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise self._unreadable(_problem(exc)) from None
        # the stored texts of the topics: a start that changes nothing in a topic writes its text
        # back as read instead of encoding it again (10,000 partitions: 0.2 s)
        for t in data.get("topics", []):
            topic = image.topics.get(t["name"])
            if topic is not None:
                self._fragments[topic.name] = (topic, json.dumps(t, sort_keys=True))
        if image.cluster_id != self.cluster_id:
            raise MetadataStoreError(
                f"{self.path} belongs to cluster {image.cluster_id}, but meta.properties says {self.cluster_id}: "
                f"these files come from different clusters; restore the matching meta.properties or move "
                f"{self.path.name} away to rebuild the topics from the log dirs"
            )
        return image

    def _unreadable(self, problem: str) -> MetadataStoreError:
        return MetadataStoreError(
            f"cannot read the metadata store {self.path}: {problem}. Nothing was changed. Move the file away "
            f"(e.g. mv {self.path} {self.path}.bad) and start again to rebuild the topics from the log dirs "
            f"(topic configs cannot be rebuilt), or restore it from a backup"
        )

    def _reconcile(self, image: MetadataImage, on_disk: OnDisk, missing: bool) -> MetadataImage:
        """Add the topics and partitions found on disk that the image does not have; refuse on a
        topic id that contradicts it.  Never removes anything."""
        by_topic: dict[str, dict[int, uuid.UUID | None]] = {}
        for (name, idx), tid in on_disk.items():
            by_topic.setdefault(name, {})[idx] = tid
        b = self._broker_id
        rebuilt: list[str] = []
        for name, parts in sorted(by_topic.items()):
            live = {idx: tid for idx, tid in parts.items() if not is_deleted(image, name, tid)}
            if not live:
                continue  # only directories of a recorded deletion: the broker deletes them
            topic = image.topics.get(name)
            ids = {tid for tid in live.values() if tid is not None}
            if topic is not None:
                foreign = sorted(idx for idx, tid in live.items() if tid is not None and tid != topic.topic_id)
                if foreign:
                    raise MetadataStoreError(
                        f"partition directories {', '.join(f'{name}-{i}' for i in foreign)} hold topic id "
                        f"{live[foreign[0]]}, but {self.path} says topic {name} has id {topic.topic_id}: "
                        f"they belong to another incarnation of the topic. Nothing was deleted; move those "
                        f"directories out of the log dir (or restore the matching {self.path.name}) and start again"
                    )
                extra = sorted(idx for idx in live if idx not in topic.partitions)
                if extra:
                    count = max(max(topic.partitions, default=-1), max(extra)) + 1
                    states = [
                        PartitionState(name, i, (b,), (b,), b, 0, 0)
                        for i in range(count)
                        if i not in topic.partitions
                    ]
                    image = image.with_partitions(name, states)
                    log.warning(
                        "%s: partition directories %s of topic %s are not in %s: the topic now has %d partitions",
                        self.path, ", ".join(f"{name}-{i}" for i in extra), name, self.path.name, count,
                    )
                continue
            if len(ids) > 1:
                raise MetadataStoreError(
                    f"the partition directories of topic {name} hold different topic ids "
                    f"({', '.join(sorted(str(i) for i in ids))}) and {self.path} does not say which is "
                    f"the topic: nothing was deleted; move the directories of the stale topic out of the "
                    f"log dir and start again"
                )
            topic_id = ids.pop() if ids else uuid.uuid4()
            count = max(live) + 1
            internal = name in self._internal_topics
            topic_info = TopicInfo(
                name,
                topic_id,
                {i: PartitionState(name, i, (b,), (b,), b, 0, 0) for i in range(count)},
                dict(self._internal_topics.get(name, REBUILT_TOPIC_CONFIGS)),
                internal,
            )
            image = image.with_topic(topic_info)
            rebuilt.append(f"{name} ({count} partitions{', internal' if internal else ''})")
        if rebuilt:
            why = "is missing" if missing else "does not list them"
            log.warning(
                "%s %s: rebuilt %d topic(s) from the partition directories in the log dirs: %s. Topic configs "
                "cannot be recovered from the log dirs: these topics now have retention.ms=-1 and "
                "retention.bytes=-1 (so that retention deletes nothing they hold) and broker defaults for the "
                "rest%s; set their configs again (AlterConfigs / odradek configs)",
                self.path, why, len(rebuilt), "; ".join(rebuilt),
                " (internal topics get their usual configs)" if self._internal_topics else "",
            )
        return image

    async def start(self, broker: BrokerInfo) -> None:
        self._broker_id = broker.broker_id
        stored = self._read(broker.broker_id)
        image = stored if stored is not None else MetadataImage.empty(self.cluster_id, broker.broker_id)
        on_disk = self._on_disk() if self._on_disk is not None else {}
        image = self._reconcile(image, on_disk, missing=stored is None)
        # recorded deletions whose directories are all gone need no record any more
        done = [
            tid
            for tid, name in image.deleted_topics.items()
            if not any(is_deleted(image, n, t) and n == name for (n, _i), t in on_disk.items())
        ]
        if done:
            image = image.without_deleted(done)
        # A single node leads everything. A restart after a crash is a new leader epoch for each
        # partition: recovery may have cut records clients saw, and the new epoch has them check
        # their positions (KIP-320).  After a clean shutdown nothing was cut and the epochs stay,
        # so a start does not write (and fsync) a leader-epoch checkpoint per partition.
        bump = stored is None or self._clean_shutdown is None or not self._clean_shutdown()
        me, mine = broker.broker_id, (broker.broker_id,)
        topics = {}
        for name, t in image.topics.items():
            if not bump and all(s.leader == me and s.isr == mine for s in t.partitions.values()):
                topics[name] = t  # as stored: the usual start after a clean shutdown
                continue
            parts = {
                p: replace(s, leader=me, isr=mine, leader_epoch=s.leader_epoch + int(bump))
                for p, s in t.partitions.items()
            }
            topics[name] = replace(t, partitions=parts)
        image = replace(image, topics=topics).with_broker(broker).with_controller(broker.broker_id)
        try:
            self._commit(image)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # a full disk must not keep the broker from starting and serving what it has: the
            # new leader epochs live in memory until the next change is written (a later start
            # bumps the stored ones again, so epochs never go backwards)
            log.warning("%s: could not record the new leader epochs (%s); the disk is full", self.path, exc.strerror)
            self._image = image
            self._publish(image)

    async def stop(self) -> None:
        pass

    def _serialize(self, image: MetadataImage) -> str:
        """``json.dumps(image.to_json(), sort_keys=True)``, from cached per-topic texts."""
        cache = self._fragments
        parts = []
        for name in sorted(image.topics):
            t = image.topics[name]
            hit = cache.get(name)
            if hit is None or hit[0] is not t:
                hit = (t, json.dumps(t.to_json(), sort_keys=True))
                cache[name] = hit
            parts.append(hit[1])
        for name in [n for n in cache if n not in image.topics]:
            del cache[name]
        head = json.dumps({**image.to_json(topics=False), "format_version": FORMAT_VERSION}, sort_keys=True)
        # "topics" sorts last among the top-level keys: splice the cached texts into its list
        assert head.endswith('"topics": []}'), head[-40:]
        return head[: -len("]}")] + ", ".join(parts) + "]}"

    def _write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, text)

    def _commit(self, image: MetadataImage) -> None:
        """Write and publish ``image`` now, on the calling thread (start-up, and the broker's
        synchronous bookkeeping while it applies a published image)."""
        self._write(self._serialize(image))
        self._image = image
        self._publish(image)

    async def _change(self, change: Callable[[MetadataImage], MetadataImage | None]) -> None:
        """Apply ``change`` to the current image (it validates against it, raising KafkaError,
        or returns None for nothing to do), write the result on a worker thread, then publish it.
        Changes run one at a time, so each sees the one before.

        A change runs to its end in a task of its own: a caller cancelled half-way (its client
        disconnected) must not leave it written but not published, or published while the
        preparation is still making its partitions' logs on a worker thread — the broker would
        then make the same logs again on the event loop, beside that thread."""
        task = asyncio.get_running_loop().create_task(self._change_now(change))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_report_orphaned_failure)
            raise

    async def _change_now(self, change: Callable[[MetadataImage], MetadataImage | None]) -> None:
        async with self._changing:
            image = change(self._image)
            if image is None:
                return
            text = self._serialize(image)
            await asyncio.get_running_loop().run_in_executor(None, self._write, text)
            try:
                await self._prepare(image)
            finally:  # stored: published whatever the preparation did
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

            def create(image: MetadataImage) -> MetadataImage:
                if name in image.topics:  # created meanwhile
                    raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
                return image.with_topic(topic)

            await self._change(create)
        return topic

    async def delete_topic(self, name: str) -> None:
        def delete(image: MetadataImage) -> MetadataImage:
            if name not in image.topics:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
            return image.without_topic(name, record_deletion=True)

        await self._change(delete)

    async def allocate_producer_ids(self) -> tuple[int, int]:
        """The next block of ``PRODUCER_ID_BLOCK`` ids, its end recorded in ``producer-id-block``
        beside the metadata file before any id of it is handed out (written off the event loop)."""
        path = self.path.parent / PRODUCER_ID_FILE

        def claim() -> int:
            start = int(path.read_text()) if path.exists() else 0
            write_atomic(path, str(start + PRODUCER_ID_BLOCK))
            return start

        start = await asyncio.to_thread(claim)
        return start, start + PRODUCER_ID_BLOCK

    def deletions_done(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """The broker deleted the partition directories of these deleted topics."""
        ids = [tid for tid in topic_ids if tid in self._image.deleted_topics]
        if ids:
            self._commit(self._image.without_deleted(ids))

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None = None, *, validate_only: bool = False
    ) -> None:
        def grow(image: MetadataImage) -> MetadataImage | None:
            topic = image.topics.get(name)
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
            if validate_only:
                return None
            return image.with_partitions(name, [self._state(name, p) for p in range(current, total)])

        if validate_only:
            grow(self._image)
        else:
            await self._change(grow)

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        def alter(image: MetadataImage) -> MetadataImage:
            if name not in image.topics:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
            return image.with_topic_configs(name, configs)

        await self._change(alter)

    async def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        await self._change(lambda image: image.with_broker_configs(configs))

    async def update_broker(self, broker: BrokerInfo) -> bool:
        await self._change(lambda image: None if image.brokers.get(broker.broker_id) == broker else image.with_broker(broker))
        return True

    async def set_user_scram(self, user: str, credentials: Mapping[str, str]) -> None:
        await self._change(lambda image: image.with_user_scram(user, credentials))

    async def alter_acls(
        self, resource: tuple[str, str, str], change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]
    ) -> frozenset[AclEntry]:
        result: list[frozenset[AclEntry]] = []

        def apply(image: MetadataImage) -> MetadataImage | None:
            before = image.acls.get(resource, frozenset())
            after = frozenset(change(before))
            result.append(after)
            if after == before:
                return None
            return image.with_acls({**image.acls, resource: after})

        await self._change(apply)
        return result[0]

    async def alter_client_quota(
        self, entity_path: str, change: Callable[[dict[str, float]], dict[str, float]]
    ) -> dict[str, float]:
        result: list[dict[str, float]] = []

        def apply(image: MetadataImage) -> MetadataImage | None:
            before = dict(image.client_quotas.get(entity_path, {}))
            after = dict(change(dict(before)))
            result.append(after)
            if after == before:
                return None
            return image.with_client_quota(entity_path, after)

        await self._change(apply)
        return result[0]

    async def update_features(
        self, change: Callable[[Mapping[str, int] | None], Mapping[str, int] | None]
    ) -> tuple[Mapping[str, int] | None, int]:
        def apply(image: MetadataImage) -> MetadataImage | None:
            after = change(image.features)
            if after is None or (image.features is not None and dict(after) == dict(image.features)):
                return None
            return image.with_features(after, image.features_epoch + 1)

        await self._change(apply)
        return self.image.features, self.image.features_epoch

    async def alter_client_metrics(
        self, name: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        result: list[dict[str, str]] = []

        def apply(image: MetadataImage) -> MetadataImage | None:
            before = dict(image.client_metrics.get(name, {}))
            after = dict(change(dict(before)))
            result.append(after)
            if after == before:
                return None
            return image.with_client_metrics(name, after)

        await self._change(apply)
        return result[0]

    async def alter_group_configs(
        self, group_id: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        result: list[dict[str, str]] = []

        def apply(image: MetadataImage) -> MetadataImage | None:
            before = dict(image.group_configs.get(group_id, {}))
            after = dict(change(dict(before)))
            result.append(after)
            if after == before:
                return None
            return image.with_group_configs(group_id, after)

        await self._change(apply)
        return result[0]
