"""Admin's replica-placement operations against a single-node broker (which names itself the
controller): elections, reassignments and log dirs answer with Kafka's per-partition errors, in
the blocking and the asyncio client.  (Moves between brokers: tests/cluster/test_reassign_cli.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.client import Admin, AdminError, AsyncAdmin, NewTopic
from odradek.errors import ErrorCode
from odradek.testing import BrokerProcess

TOPIC = "replicas"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("admin-replicas")
    with BrokerProcess(data, broker_id=1) as b:
        with Admin(bootstrap_servers=b.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1)], timeout=20)
        yield b


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        yield a


def test_preferred_election_per_partition_errors(admin: Admin) -> None:
    got = admin.elect_leaders("preferred", [(TOPIC, 0), (TOPIC, 1), (TOPIC, 9)], timeout=20)
    assert set(got) == {(TOPIC, 0), (TOPIC, 1), (TOPIC, 9)}
    assert got[(TOPIC, 0)] is not None and got[(TOPIC, 0)].code == ErrorCode.ELECTION_NOT_NEEDED
    assert got[(TOPIC, 9)] is not None and got[(TOPIC, 9)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # every partition: only those that needed an election are reported (Kafka), so none here
    assert admin.elect_leaders("preferred", None, timeout=20) == {}
    unclean = admin.elect_leaders("unclean", [(TOPIC, 2)], timeout=20)
    assert unclean[(TOPIC, 2)] is not None and unclean[(TOPIC, 2)].code == ErrorCode.ELECTION_NOT_NEEDED
    with pytest.raises(ValueError):
        admin.elect_leaders("random", None)


def test_reassignment_errors_per_partition(admin: Admin) -> None:
    # the current replicas: accepted (nothing to move); another broker, a cancel of nothing and an
    # unknown partition: refused each with Kafka's code, the accepted one's result kept
    with pytest.raises(AdminError) as info:
        admin.alter_partition_reassignments(
            {(TOPIC, 0): [1], (TOPIC, 1): [1, 7], (TOPIC, 2): None, (TOPIC, 5): [1]}, timeout=20
        )
    errors = {tp: e.code for tp, e in info.value.errors.items()}
    assert errors == {
        (TOPIC, 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        (TOPIC, 2): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
        (TOPIC, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert set(info.value.results) == {(TOPIC, 0)}
    admin.alter_partition_reassignments({(TOPIC, 0): [1]}, timeout=20)
    admin.alter_partition_reassignments({(TOPIC, 0): [1]}, allow_replication_factor_change=False, timeout=20)
    assert admin.list_partition_reassignments(timeout=20) == {}
    assert admin.list_partition_reassignments([(TOPIC, 0)], timeout=20) == {}


def test_describe_log_dirs(admin: Admin, broker: BrokerProcess) -> None:
    dirs = admin.describe_log_dirs(timeout=20)
    assert list(dirs) == [1]
    (path, d), = dirs[1].items()
    assert Path(path) == broker.data_dir.resolve()
    assert d.error is None
    assert {(TOPIC, p) for p in range(3)} <= set(d.replicas)
    assert all(r.offset_lag == 0 and not r.is_future for r in d.replicas.values())
    assert d.total_bytes is not None and d.usable_bytes is not None and 0 < d.usable_bytes <= d.total_bytes
    only = admin.describe_log_dirs([1], [(TOPIC, 1)], timeout=20)
    assert set(only[1][path].replicas) == {(TOPIC, 1)}


def test_asyncio_face(broker: BrokerProcess) -> None:
    async def main() -> None:
        async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
            got = await admin.elect_leaders("preferred", [(TOPIC, 0)], timeout=20)
            assert got[(TOPIC, 0)] is not None and got[(TOPIC, 0)].code == ErrorCode.ELECTION_NOT_NEEDED
            assert await admin.list_partition_reassignments(timeout=20) == {}
            dirs = await admin.describe_log_dirs([1], timeout=20)
            assert (TOPIC, 2) in next(iter(dirs[1].values())).replicas

    asyncio.run(main())


def test_alter_replica_log_dirs_reports_per_replica(admin: Admin) -> None:
    """A path that is not one of the broker's log dirs is refused for that replica (Kafka's
    LOG_DIR_NOT_FOUND; UNSUPPORTED_VERSION from a broker without AlterReplicaLogDirs)."""
    with pytest.raises(AdminError) as info:
        admin.alter_replica_log_dirs({(TOPIC, 0, 1): "/nonexistent-log-dir"}, timeout=20)
    assert set(info.value.errors) == {(TOPIC, 0, 1)}
    assert info.value.errors[(TOPIC, 0, 1)].code in (ErrorCode.LOG_DIR_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION)
    admin.alter_replica_log_dirs({}, timeout=20)  # nothing to move: nothing sent
