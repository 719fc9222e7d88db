"""Transactions in a 3-broker cluster: the coordinator sends its markers over the inter-broker
listener (WriteTxnMarkers) to the partitions' leaders, and its broker crashes in the middle of
commits.  Every transaction completes or aborts as a whole: a read_committed reader sees each
committed transaction's records exactly once and nothing of the others.

The cluster is the fast in-process one (odradek.testcluster): the coordinator "crashes" with
``kill_broker`` (its ZooKeeper session ends at once, no controlled shutdown) and comes back with
``start_broker``; on ZooKeeper and broker processes (SIGKILL, then the 6 s session timeout) the
test took about 45 s, about 10 s now."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.assignment import partition_for
from odradek.testcluster import FastCluster
from odradek.testing import wait_for

TXN_PARTITIONS = 5
OVERRIDES = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "transaction.state.log.num.partitions": TXN_PARTITIONS,
    "transaction.state.log.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 3,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
}


class _TxnLoop:
    """Commits transactions of 3 records (one per partition) until stopped, recording what
    commit_transaction acknowledged; a failed commit is aborted, or the producer rebuilt."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str) -> None:
        self.bootstrap, self.topic, self.txn_id = bootstrap, topic, txn_id
        self.committed: list[int] = []
        self.attempted = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _producer(self) -> ck.Producer:
        p = ck.Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id,
                         "transaction.timeout.ms": 60000})
        p.init_transactions(90)
        return p

    def _run(self) -> None:
        p = self._producer()
        n = 0
        while not self._stop.is_set():
            n += 1
            self.attempted = n
            try:
                p.begin_transaction()
                for part in range(3):
                    p.produce(self.topic, b"%d" % n, partition=part)
                p.commit_transaction(60)
                self.committed.append(n)
            except ck.KafkaException as exc:
                err = exc.args[0]
                self.errors.append(str(err))
                if err.txn_requires_abort():
                    try:
                        p.abort_transaction(60)
                    except ck.KafkaException:
                        p = self._producer()
                elif err.retriable():
                    continue
                else:
                    p = self._producer()

    def start(self) -> _TxnLoop:
        self._thread.start()
        return self

    def wait_commits(self, more: int, timeout: float, what: str) -> None:
        target = len(self.committed) + more
        deadline = time.monotonic() + timeout
        while len(self.committed) < target:
            assert time.monotonic() < deadline, f"{more} more commits {what}: {self.errors[-3:]}"
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)


def _read_committed(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"v-{uuid.uuid4().hex[:6]}",
                     "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                     "enable.partition.eof": True})
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(3)])
        got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        while len(eof) < 3:
            assert time.monotonic() < deadline, "no end of the topic within 60 s"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                eof.add(m.partition())
                continue
            eof.discard(m.partition())
            got[m.partition()].append(m.value())
        return got
    finally:
        c.close()


def test_transactions_survive_the_coordinators_death(tmp_path: Path) -> None:
    with FastCluster(tmp_path, 3, overrides=OVERRIDES) as cluster:
        _survives(cluster)


def _leader(cluster: FastCluster, topic: str, partition: int) -> int | None:
    leader = cluster.leader(topic, partition)
    return leader if leader >= 0 else None


def _survives(cluster: FastCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic, txn_id = "payments", "payer-1"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 3, 3)]).values():
        f.result(60)
    loop = _TxnLoop(bootstrap, topic, txn_id).start()
    try:
        loop.wait_commits(20, 90, "before any failure")
        txn_partition = partition_for(txn_id, TXN_PARTITIONS)
        coordinator = wait_for(lambda: _leader(cluster, "__transaction_state", txn_partition), 30,
                               "a transaction coordinator")
        # markers crossed brokers: some partition of the topic is led elsewhere
        assert any(cluster.leader(topic, p) != coordinator for p in range(3))
        cluster.kill_broker(coordinator)
        wait_for(
            lambda: _leader(cluster, "__transaction_state", txn_partition) not in (None, coordinator), 60,
            "a new transaction coordinator",
        )
        loop.wait_commits(20, 120, "after the coordinator was killed")
        cluster.start_broker(coordinator)
        loop.wait_commits(10, 120, "after it came back")
    finally:
        loop.stop()
    got = _read_committed(bootstrap, topic)
    committed = {b"%d" % n for n in loop.committed}
    for part, values in got.items():
        assert len(values) == len(set(values)), f"partition {part}: a transaction's record appears twice"
        # every acknowledged commit is there, in every partition: no transaction half-applied
        assert committed <= set(values), f"partition {part}: committed transactions missing"
    # the others (aborted, or decided while the client could not hear it) are all or nothing
    assert got[0] == got[1] == got[2]

    # KIP-890 across brokers: a leader asks the coordinator on another broker (AddPartitionsToTxn
    # verify-only) and refuses a batch of the producer's that is in no ongoing transaction
    from odradek.errors import ErrorCode
    from odradek.records import BatchBuilder
    from odradek.testing import WireClient, produce_request

    coordinator = cluster.leader("__transaction_state", partition_for(txn_id, TXN_PARTITIONS))
    stray_partition = next(p for p in range(3) if cluster.leader(topic, p) != coordinator)
    leader = cluster.leader(topic, stray_partition)
    from odradek.client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as odradek_admin:
        state = odradek_admin.describe_transactions([txn_id])[txn_id]
    assert state.state != "Ongoing", state  # the loop ended its last transaction
    b = BatchBuilder(producer_id=state.producer_id, producer_epoch=state.producer_epoch, base_sequence=0,
                     is_transactional=True)
    b.append(int(time.time() * 1000), None, b"stray")
    request = produce_request(topic, {stray_partition: bytes(b.build())}, acks=-1, transactional_id=txn_id)
    w = WireClient("127.0.0.1", cluster.ports[leader], "kip890-cluster")
    try:
        answer = w.request(request, 9).responses[0].partition_responses[0]
    finally:
        w.close()
    assert answer.error_code == ErrorCode.INVALID_TXN_STATE, answer
    after = _read_committed(bootstrap, topic)  # reaches the end: nothing hangs
    assert all(b"stray" not in values for values in after.values())
