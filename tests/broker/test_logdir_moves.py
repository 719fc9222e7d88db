"""Moving a replica between a broker's log dirs while it serves (AlterReplicaLogDirs).

In process: the future replica copies the log (offsets, log start offset after DeleteRecords
mid-batch, producer state), starts over when the current log's start moves past it or its end
is truncated below it, and the swap keeps every record, the high watermark and the log start.
End to end: a broker with two log dirs moves a partition under a full-speed idempotent acks=all
producer (a process of its own); every acknowledged record is there once, the partition's
directory is in the new dir only, DescribeLogDirs says where it is (and a future replica while
the copy runs), and a restart loads it from there.  Kafka's errors for a path that is not a log
dir and an unknown partition.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.broker.logdir_moves import ReplicaDirMoves
from odradek.broker.replica import ReplicaManager
from odradek.cluster.metadata import PartitionState
from odradek.errors import ErrorCode
from odradek.protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest
from odradek.protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from odradek.records import BatchBuilder, read_batches
from odradek.storage import LogConfig, LogManager
from odradek.testing import BrokerProcess, WireClient

PRODUCER = Path(__file__).resolve().parents[1] / "cluster" / "jobs" / "acks_all_producer.py"


def _batch(first: int, n: int) -> bytearray:
    b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=first)
    for i in range(first, first + n):
        b.append(1_700_000_000_000 + i, f"k{i}".encode(), f"v{i}".encode())
    return bytearray(b.build())


def _values(lg: object, start: int) -> list[bytes]:
    out = []
    offset = start
    while offset < lg.log_end_offset:  # type: ignore[attr-defined]
        data = lg.read(offset, 1 << 20, lg.log_end_offset).to_bytes()  # type: ignore[attr-defined]
        for batch in read_batches(data):
            for r in batch.records:
                if r.offset >= start:
                    out.append(r.value)
            offset = batch.last_offset + 1
    return out


def _manager(tmp_path: Path) -> tuple[ReplicaManager, list[Path]]:
    dirs = [tmp_path / "a", tmp_path / "b"]
    logs = LogManager(dirs, {"segment.bytes": 4096}, flush_inline=False)
    rm = ReplicaManager(1, logs, lambda _t: LogConfig.from_dict({"segment.bytes": 4096}))
    rm.become_leader(PartitionState("t", 0, (1,), (1,), 1, 0))  # in dir a
    return rm, dirs


def test_a_move_copies_everything_and_keeps_the_log_start_and_high_watermark(tmp_path: Path) -> None:
    rm, (a, b) = _manager(tmp_path)
    p = rm.get("t", 0)
    assert p is not None and p.log_dir == a
    for i in range(0, 300, 10):
        rm.append(p, _batch(i, 10), acks=1)
    p.log.maybe_increment_log_start_offset(155)  # DeleteRecords mid-batch (150..159)
    hw_before = p.high_watermark

    async def main() -> None:
        assert rm.dir_moves.request("t", 0, str(b)) is ErrorCode.NONE
        for _ in range(500):
            if not rm.dir_moves.moves:
                break
            await asyncio.sleep(0.01)
        assert not rm.dir_moves.moves
        for t in list(rm.dir_moves._old):
            t.cancel()

    asyncio.run(main())
    p = rm.get("t", 0)
    assert p is not None and p.log_dir == b and rm.logs.dir_of("t", 0) == b
    assert p.log.log_start_offset == 155 and p.log.log_end_offset == 300 and p.high_watermark == hw_before
    assert _values(p.log, 155) == [f"v{i}".encode() for i in range(155, 300)]
    assert not (a / "t-0").exists() and (b / "t-0").is_dir()
    assert not list(b.glob("*-future"))
    # the producer state came along: the next batch of producer 7 continues its sequence
    rm.append(p, _batch(300, 10), acks=1)
    assert p.log.log_end_offset == 310


def test_the_copy_starts_over_when_the_current_log_moves_under_it(tmp_path: Path) -> None:
    rm, (_a, b) = _manager(tmp_path)
    p = rm.get("t", 0)
    assert p is not None
    for i in range(0, 100, 10):
        rm.append(p, _batch(i, 10), acks=1)
    future = rm.logs.create_future(p.log, b)
    ReplicaDirMoves._copy(p.log, future, 1 << 20)
    assert future.log_end_offset == 100
    # a follower's truncation cuts the current log below the copy's end
    p.log.truncate_to(50)
    ReplicaDirMoves._realign(p.log, future)
    assert future.log_end_offset == p.log.log_start_offset == 0
    ReplicaDirMoves._copy(p.log, future, 1 << 20)
    assert future.log_end_offset == 50
    # retention / DeleteRecords moves the current start past the copy's end
    for i in range(50, 200, 10):
        rm.append(p, _batch(i, 10), acks=1)
    p.log.maybe_increment_log_start_offset(120)
    ReplicaDirMoves._realign(p.log, future)
    assert future.log_start_offset == 120 == future.log_end_offset
    while future.log_end_offset < p.log.log_end_offset:
        ReplicaDirMoves._copy(p.log, future, 1 << 20)
    new, old, old_dir = rm.logs.replace_with_future(future)
    assert _values(new, 120) == [f"v{i}".encode() for i in range(120, 200)]
    old.abandon()
    assert old_dir.name.endswith("-delete")


def test_a_leftover_copy_is_removed_at_start(tmp_path: Path) -> None:
    rm, (_a, b) = _manager(tmp_path)
    p = rm.get("t", 0)
    assert p is not None
    rm.append(p, _batch(0, 10), acks=1)
    future = rm.logs.create_future(p.log, b)
    ReplicaDirMoves._copy(p.log, future, 1 << 20)
    staging = future.directory.parent
    future.close()
    rm.logs.shutdown()
    again = LogManager([tmp_path / "a", tmp_path / "b"])
    assert not staging.exists()
    lg = again.get("t", 0)
    assert lg is not None and lg.directory.parent == tmp_path / "a" and lg.log_end_offset == 10
    again.shutdown()


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _where(client: WireClient, topic: str) -> dict[int, list[tuple[str, bool, int]]]:
    """partition -> [(log dir, is future, offset lag)] from DescribeLogDirs."""
    resp = client.request(DescribeLogDirsRequest(topics=None), 4)
    out: dict[int, list[tuple[str, bool, int]]] = {}
    for r in resp.results:
        for t in r.topics:
            if t.name == topic:
                for p in t.partitions:
                    out.setdefault(p.partition_index, []).append((Path(r.log_dir).name, p.is_future_key, p.offset_lag))
    return out


def _alter(client: WireClient, path: str, topic: str, partitions: list[int]) -> dict[int, int]:
    R = AlterReplicaLogDirsRequest
    resp = client.request(R(dirs=[R.AlterReplicaLogDir(path=path, topics=[R.AlterReplicaLogDirTopic(
        name=topic, partitions=partitions)])]), 2)
    return {p.partition_index: p.error_code for t in resp.results for p in t.partitions}


@pytest.mark.parametrize("rate", [0, 500], ids=["full-speed", "gentle"])
def test_a_partition_moves_between_log_dirs_under_an_acks_all_producer(rate: int, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    # --data-dir takes log.dirs: two dirs, comma-separated
    broker = BrokerProcess(f"{d1},{d2}", overrides={"log.segment.bytes": 1 << 20})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("moving", 1, 1)]).values():
            f.result(30)
        client = WireClient(broker.host, broker.port)
        [(src, _, _)] = _where(client, "moving")[0]
        dst = d2 if src == "d1" else d1
        assert _alter(client, str(tmp_path / "nowhere"), "moving", [0]) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
        assert _alter(client, str(dst), "no-such-topic", [0]) == {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        stop, out = tmp_path / "stop", tmp_path / "producer.json"
        producer = subprocess.Popen(
            [sys.executable, str(PRODUCER), broker.bootstrap, "moving", str(stop), str(out), str(rate)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=(tmp_path / "producer.err").open("wb"),
        )
        try:
            time.sleep(2)  # a few MB written before the move
            deadline = time.monotonic() + 60
            if rate == 0:
                assert _alter(client, str(dst), "moving", [0]) == {0: ErrorCode.NONE}
            else:  # through the CLI
                before = json.loads(_cli("log-dirs", "-b", broker.bootstrap, "describe", "--topic-list", "moving",
                                         "--output", "json"))
                [b] = before["brokers"]
                assert [(Path(d["logDir"]).name, [p["partition"] for p in d["partitions"]]) for d in b["logDirs"]] \
                    == sorted([(src, ["moving-0"]), (dst.name, [])])
                _cli("log-dirs", "-b", broker.bootstrap, "move", "--topic", "moving", "--partition", "0",
                     "--broker", str(b["broker"]), "--dir", str(dst))
            seen_future = False
            moved = None
            while time.monotonic() < deadline:
                where = _where(client, "moving").get(0, [])
                seen_future |= any(future for _, future, _ in where)
                if where == [(dst.name, False, 0)]:
                    moved = time.monotonic()
                    break
                time.sleep(0.05)
            assert moved is not None, _where(client, "moving")
            time.sleep(1)  # producing on into the moved log
            stop.touch()
            producer.wait(120)
        finally:
            if producer.poll() is None:
                producer.kill()
                producer.wait(10)
        result = json.loads(out.read_text())
        assert result["error_count"] == 0 and result["unflushed"] == 0, result["errors"]
        acked = result["acked"]
        after = json.loads(_cli("log-dirs", "-b", broker.bootstrap, "describe", "--output", "json"))
        where = {Path(d["logDir"]).name: [(p["partition"], p["isFuture"]) for p in d["partitions"]
                                           if p["partition"].startswith("moving-")]
                 for d in after["brokers"][0]["logDirs"]}
        assert where == {src: [], dst.name: [("moving-0", False)]}
        assert not (tmp_path / src / "moving-0").exists()
        assert (dst / "moving-0" / "partition.metadata").exists()

        def consume_all() -> list[int]:
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{time.monotonic()}",
                          "enable.auto.commit": False, "auto.offset.reset": "earliest"})
            c.assign([TopicPartition("moving", 0, 0)])
            got: list[int] = []
            end = time.monotonic() + 120
            try:
                while len(got) < len(acked) and time.monotonic() < end:
                    got += [int(m.value()) for m in c.consume(10000, 0.5) if m.error() is None]
            finally:
                c.close()
            return got

        got = consume_all()
        assert len(got) == len(set(got)) and set(acked) <= set(got), (len(acked), len(got))
        client.close()
        broker.stop()
        broker.start()
        client = WireClient(broker.host, broker.port)
        assert _where(client, "moving") == {0: [(dst.name, False, 0)]}
        assert not list((tmp_path / src).glob("moving-0*")), "the replaced log's files were not removed at start"
        assert sorted(consume_all()) == sorted(got)
        client.close()
        print(f"\nmoved a partition between log dirs ({'full speed' if rate == 0 else f'{rate}/s'}): "
              f"{len(acked)} records acknowledged, {result['longest_gap_s']} s longest write stall, "
              f"future replica seen: {seen_future}")
    finally:
        broker.stop()
