"""Partition assignment of the ZooKeeper-coordinated high-level consumer (pure functions).

Kafka 0.8-0.10's ``kafka.consumer.PartitionAssignor``: every consumer of a group computes the
same assignment from the same inputs — each consumer's subscription ``{topic: stream count}``
(read from ``/consumers/<group>/ids``) and each topic's partitions (``/brokers/topics``) — and
keeps the share of its own consumer threads.  A consumer thread id is ``"<consumer id>-<n>"``,
ordered by consumer id, then by ``n`` as a number (Kafka's ``ConsumerThreadId``).

* ``range`` (the seeds' algorithm): per topic, the sorted threads subscribed to it and the
  sorted partitions; thread ``i`` of ``c`` gets ``n // c`` partitions starting at
  ``(n // c) * i + min(i, n % c)``, one more when ``i < n % c``.
* ``roundrobin``: every consumer must have the same subscription; all partitions, ordered by
  the Java hash code of ``"[topic,partition]"`` (Kafka's shuffle), are dealt in turn to the
  sorted threads.

Both return ``{(topic, partition): thread id}``.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "ZK_ASSIGNORS",
    "java_string_hash",
    "range_assign",
    "roundrobin_assign",
    "thread_id_key",
    "thread_ids",
]

TopicPartition = tuple[str, int]


def thread_ids(consumer_id: str, count: int) -> list[str]:
    """A consumer's thread ids for one topic: ``<consumer id>-0`` ... ``<consumer id>-<count-1>``."""
    return [f"{consumer_id}-{n}" for n in range(count)]


def thread_id_key(thread_id: str) -> tuple[str, int]:
    """Kafka's ConsumerThreadId order: by consumer id, then by thread number."""
    consumer, _, n = thread_id.rpartition("-")
    return (consumer, int(n)) if n.isdigit() else (thread_id, -1)


def java_string_hash(s: str) -> int:
    """``java.lang.String.hashCode`` (a signed 32-bit int) over UTF-16 code units."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _threads_per_topic(subscriptions: Mapping[str, Mapping[str, int]]) -> dict[str, list[str]]:
    per: dict[str, list[str]] = {}
    for consumer, topics in subscriptions.items():
        for topic, count in topics.items():
            per.setdefault(topic, []).extend(thread_ids(consumer, count))
    return {t: sorted(ids, key=thread_id_key) for t, ids in per.items()}


def range_assign(
    subscriptions: Mapping[str, Mapping[str, int]], partitions: Mapping[str, list[int]]
) -> dict[TopicPartition, str]:
    """``subscriptions``: consumer id -> {topic: stream count}; ``partitions``: topic -> its
    partition ids.  Topics without partitions (not created yet) get nothing."""
    out: dict[TopicPartition, str] = {}
    for topic, threads in sorted(_threads_per_topic(subscriptions).items()):
        parts = sorted(partitions.get(topic, []))
        if not threads or not parts:
            continue
        per, extra = divmod(len(parts), len(threads))
        for i, thread in enumerate(threads):
            start = per * i + min(i, extra)
            n = per + (1 if i < extra else 0)
            for p in parts[start : start + n]:
                out[(topic, p)] = thread
    return out


def roundrobin_assign(
    subscriptions: Mapping[str, Mapping[str, int]], partitions: Mapping[str, list[int]]
) -> dict[TopicPartition, str]:
    """Kafka 0.10's RoundRobinAssignor; ValueError unless every consumer subscribes to the same
    topics with the same stream counts (Kafka requires it)."""
    if not subscriptions:
        return {}
    subs = [dict(s) for s in subscriptions.values()]
    counts = {c for s in subs for c in s.values()}
    if any(s != subs[0] for s in subs) or len(counts) > 1:
        raise ValueError("round-robin assignment needs every consumer to subscribe to the same topics with the same stream count")
    threads = sorted({t for ids in _threads_per_topic(subscriptions).values() for t in ids}, key=thread_id_key)
    all_parts = [(t, p) for t in subs[0] for p in partitions.get(t, [])]
    # Kafka sorts by the hash code only (a stable sort keeps the topic, partition order on ties)
    all_parts.sort(key=lambda tp: (tp[0], tp[1]))
    all_parts.sort(key=lambda tp: java_string_hash(f"[{tp[0]},{tp[1]}]"))
    out: dict[TopicPartition, str] = {}
    if not threads:
        return out
    for i, tp in enumerate(all_parts):
        out[tp] = threads[i % len(threads)]
    return out


ZK_ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign}
