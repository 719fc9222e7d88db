"""The workload: several confluent-kafka producers and consumers over one topic, every step recorded.

Producers (values ``<proc>-<seq>``, unique, written to partition ``seq % partitions``):

* ``pi1``, ``pi2``: idempotent, ``acks=all``;
* ``pa``: not idempotent, ``acks=all`` (retries may duplicate or reorder; must not lose);
* ``p1``: not idempotent, ``acks=1`` (may lose records when a leader dies: Kafka allows it).

A producer whose client raises a fatal error (an idempotent producer's fenced or unrecoverable state)
is replaced by a new incarnation (``pi1.2``...): ordering and duplicate guarantees hold per incarnation.

Consumers:

* ``ca``: ``assign()`` to every partition from the beginning, commits its position to group ``g-assign``;
* ``cg1``, ``cg2``: ``subscribe()`` in group ``g-sub`` (manual synchronous commits);
* ``obs``: reads both groups' committed offsets about once a second (``committed`` events).

Every event goes to a JSON-lines :class:`History` with ``t`` = seconds on the monotonic clock since the run
started. The event types are described in :mod:`tests.cluster.history.checker`.
``ODRADEK_TEST_RDKAFKA_DEBUG=eos,msg,broker`` turns on librdkafka's debug log of the producers (stderr).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

GROUP_ASSIGN = "g-assign"
GROUP_SUB = "g-sub"


class History:
    """An append-only JSON-lines file, shared by threads; every line flushed as written."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w")  # noqa: SIM115 (closed in close())
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        self.counts: dict[str, int] = {}

    def now(self) -> float:
        return time.monotonic() - self.t0

    def log(self, type_: str, **fields: Any) -> None:
        with self._lock:
            event = {"t": round(self.now(), 4), "type": type_, **fields}
            self._f.write(json.dumps(event) + "\n")
            self._f.flush()
            self.counts[type_] = self.counts.get(type_, 0) + 1

    def close(self) -> None:
        with self._lock:
            self._f.close()


def _value(msg: Any) -> str:
    v = msg.value()
    return v.decode() if isinstance(v, bytes) else str(v)


def _where(msg: Any) -> tuple[int, int]:
    """(partition, offset) of a consumed record (never None for a record without an error)."""
    p, o = msg.partition(), msg.offset()
    assert p is not None and o is not None
    return int(p), int(o)


class ProducerWorker:
    def __init__(self, history: History, bootstrap: str, topic: str, partitions: int, name: str, *,
                 idempotent: bool, acks: str, rate: float) -> None:
        self.h = history
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.base = name
        self.idempotent = idempotent
        self.acks = acks
        self.interval = 1.0 / rate
        self.incarnation = 1
        self.name = name
        self.fatal = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{name}", daemon=True)
        self.producer = self._make()

    def _make(self) -> Producer:
        self.fatal.clear()
        conf = {
            "bootstrap.servers": self.bootstrap,
            "acks": self.acks,
            "enable.idempotence": self.idempotent,
            "linger.ms": 5,
            "message.timeout.ms": 30000,
            "request.timeout.ms": 10000,
            "topic.metadata.refresh.interval.ms": 1000,
            "retry.backoff.ms": 200,
            "error_cb": self._error_cb,
            "log_level": 2,  # connection failures come through error_cb; keep stderr readable
        }
        debug = os.environ.get("ODRADEK_TEST_RDKAFKA_DEBUG")  # e.g. "eos,msg,broker": to stderr
        if debug:
            conf["debug"] = debug
            conf["log_level"] = 7
        if not self.idempotent:
            conf["max.in.flight.requests.per.connection"] = 5
            conf["retries"] = 10
        return Producer(conf)

    def _error_cb(self, err: KafkaError) -> None:
        self.h.log("client_error", proc=self.name, error=str(err), fatal=err.fatal())
        if err.fatal():
            self.fatal.set()

    def _delivery(self, err: Any, msg: Any) -> None:
        value = _value(msg)
        proc = value.rsplit("-", 1)[0]
        if err is not None:
            self.h.log("error", proc=proc, value=value, error=str(err))
        else:
            self.h.log("ack", proc=proc, value=value, partition=msg.partition(), offset=msg.offset())

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            if self.fatal.is_set():  # a new incarnation: new producer id, new sequence space
                self.producer.flush(5)
                self.incarnation += 1
                self.name = f"{self.base}.{self.incarnation}"
                self.producer = self._make()
                seq = 0
            value = f"{self.name}-{seq:08d}"
            partition = seq % self.partitions
            try:
                self.producer.produce(self.topic, value=value.encode(), partition=partition,
                                      on_delivery=self._delivery)
            except BufferError:
                self.producer.poll(0.1)
                continue
            except KafkaException as exc:
                self.h.log("error", proc=self.name, value=value, error=f"produce() raised {exc}")
                seq += 1
                continue
            self.h.log("send", proc=self.name, value=value, partition=partition, seq=seq,
                       idempotent=self.idempotent, acks=self.acks)
            seq += 1
            self.producer.poll(0)
            self._stop.wait(self.interval)

    def start(self) -> ProducerWorker:
        self._thread.start()
        return self

    def stop(self, flush_timeout: float = 40.0) -> int:
        """Stop producing; wait (bounded) for every record's outcome; the number left unresolved."""
        self._stop.set()
        self._thread.join(10)
        remaining = self.producer.flush(flush_timeout)
        if remaining:
            self.h.log("unresolved", proc=self.name, count=remaining)
        return int(remaining)


class ConsumerWorker:
    """``mode`` "assign": every partition from the beginning; "group": subscribe in a group."""

    def __init__(self, history: History, bootstrap: str, topic: str, partitions: int, name: str, *,
                 mode: str, group: str, commit_every: float = 1.0) -> None:
        self.h = history
        self.topic = topic
        self.partitions = partitions
        self.name = name
        self.mode = mode
        self.group = group
        self.commit_every = commit_every
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000,
            "partition.assignment.strategy": "range,roundrobin",  # librdkafka's default: eager
            "error_cb": self._error_cb,
            "log_level": 2,
        }
        # The rebalance callbacks assign and unassign themselves, as the protocol wants, decided here once:
        # left to confluent-kafka, it asks librdkafka for the protocol (rd_kafka_rebalance_protocol) after
        # every callback -- one more request to the group's queue, waited for with the GIL held; a whole
        # test run hung in it, in close() (see also _leave).
        self.cooperative = "cooperative" in str(config["partition.assignment.strategy"])
        self.consumer = Consumer(config)
        self.position: dict[int, int] = {}  # next offset to read, per partition
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{name}", daemon=True)

    def _error_cb(self, err: KafkaError) -> None:
        self.h.log("client_error", proc=self.name, error=str(err), fatal=err.fatal())

    def _on_assign(self, consumer: Any, parts: list[TopicPartition]) -> None:
        self.h.log("assigned", proc=self.name, group=self.group, partitions=sorted(tp.partition for tp in parts))
        try:
            if self.cooperative:
                consumer.incremental_assign(parts)
            else:
                consumer.assign(parts)
        except (KafkaException, RuntimeError) as exc:
            self.h.log("client_error", proc=self.name, error=f"assign: {exc}", fatal=False)

    def _on_revoke(self, consumer: Any, parts: list[TopicPartition]) -> None:
        self._commit()
        for tp in parts:
            self.position.pop(tp.partition, None)
        self.h.log("revoked", proc=self.name, group=self.group, partitions=sorted(tp.partition for tp in parts))
        try:
            if self.cooperative:
                consumer.incremental_unassign(parts)
            else:
                consumer.unassign()
        except (KafkaException, RuntimeError) as exc:
            self.h.log("client_error", proc=self.name, error=f"unassign: {exc}", fatal=False)

    def _commit(self) -> None:
        offsets = [TopicPartition(self.topic, p, o) for p, o in sorted(self.position.items())]
        if not offsets:
            return
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self.h.log("commit_error", proc=self.name, group=self.group, error=str(exc))
            return
        for tp in result or []:
            if tp.error is None:
                self.h.log("commit", proc=self.name, group=self.group, partition=tp.partition, offset=tp.offset)
            else:
                self.h.log("commit_error", proc=self.name, group=self.group, partition=tp.partition,
                           error=str(tp.error))

    def _run(self) -> None:
        if self.mode == "assign":
            self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        else:
            self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        last_commit = time.monotonic()
        while not self._stop.is_set():
            self._poll()
            if time.monotonic() - last_commit >= self.commit_every:
                self._commit()
                last_commit = time.monotonic()
        if self.mode == "group":
            self._leave()

    def _poll(self) -> None:
        try:
            msg = self.consumer.poll(0.2)
        except KafkaException as exc:
            self.h.log("client_error", proc=self.name, error=str(exc), fatal=False)
            return
        if msg is None:
            return
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError.OFFSET_OUT_OF_RANGE or "out of range" in str(err).lower():
                self.h.log("reset", proc=self.name, group=self.group, partition=msg.partition(), reason=str(err))
            elif err.code() != KafkaError._PARTITION_EOF:
                self.h.log("consumer_error", proc=self.name, error=str(err))
            return
        p, o = _where(msg)
        prev = self.position.get(p)
        if prev is not None and o < prev:
            # the client went back (an automatic offset reset): a documented reset
            self.h.log("reset", proc=self.name, group=self.group, partition=p,
                       reason=f"position went back from {prev} to {o}")
        self.position[p] = o + 1
        self.h.log("poll", proc=self.name, group=self.group, mode=self.mode, partition=p, offset=o,
                   value=_value(msg))

    def _leave(self, timeout: float = 15.0) -> None:
        """Unsubscribe and poll (bounded) until the partitions are revoked: the revocation (its last commit
        included) runs here, in poll(), while the group's machinery is all there, and close() finds nothing
        left to revoke."""
        try:
            self.consumer.unsubscribe()
        except (KafkaException, RuntimeError) as exc:
            self.h.log("client_error", proc=self.name, error=f"unsubscribe: {exc}", fatal=False)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._poll()
            try:
                if not self.consumer.assignment():
                    return
            except (KafkaException, RuntimeError) as exc:
                self.h.log("client_error", proc=self.name, error=f"assignment: {exc}", fatal=False)
                return
        self.h.log("client_error", proc=self.name, error=f"still assigned {timeout:.0f} s after unsubscribe",
                   fatal=False)

    def start(self) -> ConsumerWorker:
        self._thread.start()
        return self

    def stop(self, close_timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._thread.is_alive():
            # still inside the client: closing it from here too would be a second thread in it
            self.h.log("client_error", proc=self.name, error="the consumer thread did not stop", fatal=False)
            return

        def close() -> None:
            try:
                self.consumer.close()
            except Exception as exc:  # a diagnostic: the history is what matters
                self.h.log("client_error", proc=self.name, error=f"close: {exc}", fatal=False)

        # bounded: a close() stuck in the client is recorded and left behind (a daemon thread)
        closer = threading.Thread(target=close, name=f"close-{self.name}", daemon=True)
        closer.start()
        closer.join(close_timeout)
        if closer.is_alive():
            self.h.log("client_error", proc=self.name, error=f"close did not finish in {close_timeout:.0f} s",
                       fatal=False)


class OffsetObserver:
    """Reads the groups' committed offsets about once a second (not a group member)."""

    def __init__(self, history: History, bootstrap: str, topic: str, partitions: int, groups: list[str]) -> None:
        self.h = history
        self.topic = topic
        self.partitions = partitions
        self.consumers = {
            g: Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False, "log_level": 2})
            for g in groups
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="observer", daemon=True)

    def read(self, group: str, type_: str = "committed", timeout: float = 5.0) -> bool:
        """One OffsetFetch; ``committed`` events carry ``issued``, when the read was asked for."""
        c = self.consumers[group]
        issued = round(self.h.now(), 4)
        try:
            got = c.committed([TopicPartition(self.topic, p) for p in range(self.partitions)], timeout=timeout)
        except KafkaException:
            return False
        for tp in got:
            if tp.error is None:
                self.h.log(type_, proc="obs", group=group, partition=tp.partition, offset=tp.offset, issued=issued)
        return True

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for g in self.consumers:
                self.read(g)

    def start(self) -> OffsetObserver:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop observing; then read every group's committed offsets once more (``final_committed``)."""
        self._stop.set()
        self._thread.join(30)
        for g in self.consumers:
            for _ in range(6):
                if self.read(g, "final_committed", timeout=10):
                    break
        for c in self.consumers.values():
            c.close()


class Workload:
    """Every producer and consumer of one run."""

    def __init__(self, history: History, bootstrap: str, topic: str, partitions: int, *, rate: float = 25.0) -> None:
        self.h = history
        self.producers = [
            ProducerWorker(history, bootstrap, topic, partitions, "pi1", idempotent=True, acks="all", rate=rate),
            ProducerWorker(history, bootstrap, topic, partitions, "pi2", idempotent=True, acks="all", rate=rate),
            ProducerWorker(history, bootstrap, topic, partitions, "pa", idempotent=False, acks="all", rate=rate),
            ProducerWorker(history, bootstrap, topic, partitions, "p1", idempotent=False, acks="1", rate=rate),
        ]
        self.consumers = [
            ConsumerWorker(history, bootstrap, topic, partitions, "ca", mode="assign", group=GROUP_ASSIGN),
            ConsumerWorker(history, bootstrap, topic, partitions, "cg1", mode="group", group=GROUP_SUB),
            ConsumerWorker(history, bootstrap, topic, partitions, "cg2", mode="group", group=GROUP_SUB),
        ]
        self.observer = OffsetObserver(history, bootstrap, topic, partitions, [GROUP_ASSIGN, GROUP_SUB])

    def start(self) -> Workload:
        for p in self.producers:
            p.start()
        for c in self.consumers:
            c.start()
        self.observer.start()
        return self

    def acked(self) -> int:
        return self.h.counts.get("ack", 0)

    def stop_producers(self, flush_timeout: float = 40.0) -> int:
        """Stop every producer at once; wait (bounded) for outcomes; the number of unresolved records."""
        results: list[int] = []
        threads = [threading.Thread(target=lambda w=w: results.append(w.stop(flush_timeout))) for w in self.producers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.h.log("workload_end")
        return sum(results)

    def stop_consumers(self) -> None:
        """Stop the consumers (their last commits included), then the observer (its final read)."""
        for c in self.consumers:
            c.stop()
        self.observer.stop()


def final_read(history: History, bootstrap: str, topic: str, partitions: int, *, timeout: float = 60.0,
               sleep: Callable[[float], None] = time.sleep) -> bool:
    """Read every partition from the beginning up to its high watermark, recording ``read`` events and a
    ``final`` event; whether every high watermark was reached within ``timeout``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "final-read", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True, "log_level": 2})
    deadline = time.monotonic() + timeout
    marks: dict[int, int] = {}
    try:
        while len(marks) < partitions and time.monotonic() < deadline:
            for p in range(partitions):
                if p in marks:
                    continue
                try:
                    _low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)
                    marks[p] = high
                except KafkaException:
                    sleep(0.5)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        pos = {p: 0 for p in range(partitions)}
        while time.monotonic() < deadline and any(pos[p] < marks.get(p, 1 << 62) for p in range(partitions)):
            msg = c.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            p, o = _where(msg)
            history.log("read", partition=p, offset=o, value=_value(msg))
            pos[p] = o + 1
        complete = len(marks) == partitions and all(pos[p] >= marks[p] for p in range(partitions))
        history.log("final", partitions=partitions, high_watermarks={str(p): h for p, h in marks.items()},
                    positions={str(p): o for p, o in pos.items()}, complete=complete)
        return complete
    finally:
        c.close()
