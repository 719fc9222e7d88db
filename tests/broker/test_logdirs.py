"""The log dirs' failure channel (Kafka's LogDirFailureChannel) and the replica manager's use of it.

A FileOps that fails on one log dir injects the errors: EIO takes that dir offline (produce and
fetch answer KAFKA_STORAGE_ERROR, the other dir keeps working, one ERROR line), ENOSPC makes it
full (writes refused, reads served, back once there is room), and a write that fails half-way
leaves no half batch in the segment.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from odradek.broker.logdirs import DirState, LogDirFailureChannel
from odradek.broker.replica import ReplicaManager
from odradek.cluster.metadata import PartitionState
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import Message
from odradek.records import BatchBuilder, read_batches
from odradek.storage import Log, LogConfig, LogManager
from odradek.storage.files import FileOps
from odradek.testing import produce_request
from tests.broker.inprocess import hosted, running_broker


def _batch(i: int, size: int = 100) -> bytearray:
    b = BatchBuilder()
    b.append(1_700_000_000_000 + i, f"k{i}".encode(), f"{i:06d}".encode() + b"v" * size)
    return bytearray(b.build())


class FailingFiles(FileOps):
    """Fails writes (and optionally syncs) of files under ``root`` with ``code`` while armed;
    ``partial`` writes that many bytes first, as a disk filling up mid-write does."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.code = errno.EIO
        self.partial = 0

    def _armed(self, fd: int) -> bool:
        if self.root is None:
            return False
        import os

        return os.readlink(f"/proc/self/fd/{fd}").startswith(str(self.root))

    def write_at(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
        if self._armed(fd):
            if self.partial:
                super().write_at(fd, memoryview(data)[: self.partial], position)
            raise OSError(self.code, "injected")
        super().write_at(fd, data, position)


def _manager(tmp_path: Path, files: FileOps) -> tuple[ReplicaManager, list[Path]]:
    dirs = [tmp_path / "a", tmp_path / "b"]
    logs = LogManager(dirs, files=files, flush_inline=False)
    rm = ReplicaManager(1, logs, lambda _t: LogConfig.from_dict({}))
    for partition in (0, 1):  # the manager puts partition 0 in dir a, partition 1 in dir b
        rm.become_leader(PartitionState("t", partition, (1,), (1,), 1, 0))
    return rm, dirs


def _storage_error(fn: object) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        fn()  # type: ignore[operator]
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    return info.value


def test_eio_takes_the_dir_offline_the_other_dir_keeps_working(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files = FailingFiles()
    rm, (a, b) = _manager(tmp_path, files)
    pa, pb = rm.get("t", 0), rm.get("t", 1)
    assert pa is not None and pb is not None and pa.log_dir == a and pb.log_dir == b
    for i in range(3):
        rm.append(pa, _batch(i), 1)
    files.root = a
    caplog.set_level(logging.INFO, "odradek.broker.logdirs")
    for i in range(5):
        _storage_error(lambda i=i: rm.append(pa, _batch(i), 1))
    assert rm.log_dirs.state(a) is DirState.OFFLINE
    _storage_error(lambda: rm.read(pa, 0, 1 << 20, isolation_committed=False, replica_id=-1, min_one=True))
    # the other dir is untouched
    info = rm.append(pb, _batch(0), 1)
    assert info.first_offset == 0
    assert rm.read(pb, 0, 1 << 20, isolation_committed=False, replica_id=-1, min_one=True).size > 0
    assert rm.log_dirs.error_code(a) == ErrorCode.KAFKA_STORAGE_ERROR
    assert rm.log_dirs.error_code(b) == ErrorCode.NONE
    # offline stays offline (a restart recovers it), even when the disk works again
    files.root = None
    _storage_error(lambda: rm.append(pa, _batch(9), 1))
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert str(a) in errors[0].getMessage() and "EIO" in errors[0].getMessage()


def test_enospc_makes_the_dir_full_reads_go_on_and_writes_come_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = FailingFiles()
    rm, (a, _b) = _manager(tmp_path, files)
    pa = rm.get("t", 0)
    assert pa is not None
    for i in range(3):
        rm.append(pa, _batch(i), 1)
    size_before = pa.log.active.size
    files.root, files.code, files.partial = a, errno.ENOSPC, 37  # part of the batch reaches the file
    caplog.set_level(logging.INFO, "odradek.broker.logdirs")
    room = {"free": True}
    monkeypatch.setattr(LogDirFailureChannel, "_has_room", staticmethod(lambda _d, _n: room["free"]))
    _storage_error(lambda: rm.append(pa, _batch(3), 1))
    assert rm.log_dirs.state(a) is DirState.FULL
    # the half-written batch was cut off: the file ends at the last whole batch
    assert pa.log.active.size == size_before == Path(pa.log.active.log_path).stat().st_size
    # still full on disk: refused before any write is tried
    room["free"] = False
    _storage_error(lambda: rm.append(pa, _batch(3), 1))
    # reads keep working
    data = rm.read(pa, 0, 1 << 20, isolation_committed=False, replica_id=-1, min_one=True).to_bytes()
    assert [r.offset for batch in read_batches(data) for r in batch.records] == [0, 1, 2]
    # space is freed: the next append is tried, succeeds and brings the dir back
    room["free"] = True
    files.root = None
    assert rm.append(pa, _batch(3), 1).first_offset == 3
    assert rm.log_dirs.state(a) is DirState.ONLINE
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "is full" in errors[0].getMessage(), [r.getMessage() for r in errors]
    assert any("accepts writes again" in r.getMessage() for r in caplog.records)
    # nothing half-written stays in the log: a reopened log holds exactly the four batches
    pa.log.close()
    reopened = Log(pa.log.directory, LogConfig.from_dict({}), clean_shutdown=True)
    data = reopened.read(0, 1 << 20).to_bytes()
    values = [r.value[:6] for batch in read_batches(data) for r in batch.records]
    assert values == [b"000000", b"000001", b"000002", b"000003"]
    reopened.close()


def test_an_error_outside_any_log_dir_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    channel = LogDirFailureChannel([tmp_path / "a", tmp_path / "b"])
    caplog.set_level(logging.INFO, "odradek.broker.logdirs")
    for _ in range(3):
        err = channel.fail(None, OSError(errno.EIO, "injected"), "running the checkpoint task")
        assert err.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1
    assert not channel.any_failed
    # a file name inside a dir names the dir
    channel.fail(None, OSError(errno.EIO, "injected", str(tmp_path / "b" / "t-0" / "x.log")), "reading")
    assert channel.state(tmp_path / "b") is DirState.OFFLINE and channel.state(tmp_path / "a") is DirState.ONLINE


class _BrokenDisk(FileOps):
    """Every write and sync fails with EIO."""

    def write_at(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    def datasync(self, fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")


def test_broker_serves_the_other_dir_reports_the_offline_one_and_stops_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    from odradek.protocol.messages.describe_log_dirs import DescribeLogDirsRequest
    from odradek.protocol.messages.fetch import FetchRequest
    from odradek.protocol.messages.list_offsets import ListOffsetsRequest
    from odradek.storage.manager import CLEAN_SHUTDOWN_FILE

    from .test_request_pipeline import _Client

    dirs = [tmp_path / "a", tmp_path / "b"]
    caplog.set_level(logging.INFO)

    def produce(i: int) -> Message:
        return produce_request("t", {p: bytes(_batch(i)) for p in (0, 1)})

    fetch = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
        topics=[FetchRequest.FetchTopic(topic="t", partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in (0, 1)
        ])],
    )

    async def main() -> dict[int, Path]:
        where: dict[int, Path] = {}
        async with running_broker(*dirs) as broker:
            await broker.topics.create("t", 2, 1, {})
            await hosted(broker, "t", 1)
            parts = {i: broker.replicas.get("t", i) for i in (0, 1)}
            where = {i: p.log_dir for i, p in parts.items()}  # type: ignore[union-attr,misc]
            assert set(where.values()) == set(dirs)
            client = await _Client.connect(broker)
            client.send(produce(0), 9)
            answer = (await client.receive()).response
            assert [r.error_code for r in answer.responses[0].partition_responses] == [0, 0]
            # the disk under partition 0's dir breaks
            broken = parts[0].log  # type: ignore[union-attr]
            broken.files = _BrokenDisk()
            for seg in broken.segments:
                seg.files = broken.files
            for i in (1, 2, 3):
                client.send(produce(i), 9)
                answer = (await client.receive()).response
                codes = [r.error_code for r in answer.responses[0].partition_responses]
                assert codes == [ErrorCode.KAFKA_STORAGE_ERROR, 0], codes
            client.send(fetch, 11)
            answer = (await client.receive()).response
            codes = [p.error_code for p in answer.responses[0].partitions]
            assert codes == [ErrorCode.KAFKA_STORAGE_ERROR, 0], codes
            assert len(list(read_batches(bytes(answer.responses[0].partitions[1].records)))) == 4
            L = ListOffsetsRequest
            client.send(L(replica_id=-1, topics=[L.ListOffsetsTopic(name="t", partitions=[
                L.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in (0, 1)])]), 5)
            answer = (await client.receive()).response
            codes = [p.error_code for p in answer.topics[0].partitions]
            assert codes == [ErrorCode.KAFKA_STORAGE_ERROR, 0], codes
            client.send(DescribeLogDirsRequest(topics=None), 1)
            answer = (await client.receive()).response
            by_dir = {r.log_dir: r.error_code for r in answer.results}
            assert by_dir == {str(where[0].resolve()): ErrorCode.KAFKA_STORAGE_ERROR, str(where[1].resolve()): 0}
            client.close()
        return where  # the broker stopped (leaving the block) without raising

    where = asyncio.run(main())
    assert not (where[0] / CLEAN_SHUTDOWN_FILE).exists(), "a failed dir must be recovered at the next start"
    assert (where[1] / CLEAN_SHUTDOWN_FILE).exists()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "offline" in errors[0] and str(where[0]) in errors[0], errors
    assert not any(r.exc_info for r in caplog.records), "a traceback was logged"


def test_a_failed_flush_takes_the_dir_offline(tmp_path: Path) -> None:
    import asyncio

    rm, (a, _b) = _manager(tmp_path, FileOps())
    pa = rm.get("t", 0)
    assert pa is not None
    pa.log.update_config(LogConfig.from_dict({"flush.messages": 1}))
    rm.append(pa, _batch(0), 1)
    broken = _BrokenDisk()
    for seg in pa.log.segments:
        seg.files = broken

    async def flush() -> None:
        await rm.wait_durable(pa)

    # fsync failed: whether the data reached the disk is unknown, so the dir goes offline (Kafka)
    _storage_error(lambda: asyncio.run(flush()))
    assert rm.log_dirs.state(a) is DirState.OFFLINE


class _NoNewFiles(FileOps):
    def __init__(self) -> None:
        self.refuse = False

    def open(self, path: Path) -> int:
        if self.refuse:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return super().open(path)


def test_a_roll_that_cannot_create_the_new_segment_keeps_the_old_one_writable(tmp_path: Path) -> None:
    files = _NoNewFiles()
    cfg = LogConfig.from_dict({"segment.bytes": 1024, "index.interval.bytes": 1})
    lg = Log(tmp_path / "t-0", cfg, files=files, clean_shutdown=True)
    lg.append(_batch(0, 600))
    files.refuse = True
    with pytest.raises(OSError):
        lg.append(_batch(1, 600))  # needs a roll: the new segment's file cannot be created
    assert len(lg.segments) == 1 and lg.log_end_offset == 1
    files.refuse = False
    lg.append(_batch(1, 10))  # fits in the old segment, whose index must still take entries
    lg.append(_batch(2, 600))  # rolls now
    assert [s.base_offset for s in lg.segments] == [0, 2]
    data = b"".join(lg.read(o, 1 << 20).to_bytes() for o in (0, 2))
    assert [r.offset for b in read_batches(data) for r in b.records] == [0, 1, 2]
    lg.close()


def test_a_partition_whose_log_could_not_be_created_is_created_on_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metadata of a new topic was written but its log could not be created (the disk filled
    up in between): the image is still applied, produce answers KAFKA_STORAGE_ERROR while the log
    cannot be created, and the log is created on the first produce once it can."""
    import asyncio

    async def main() -> None:
        async with running_broker(tmp_path / "d") as broker:
            real = broker.logs.get_or_create
            full = {"on": True}

            def get_or_create(topic: str, partition: int, *args: object, **kw: object) -> Log:
                if full["on"] and topic == "late":
                    raise OSError(errno.ENOSPC, "No space left on device")
                return real(topic, partition, *args, **kw)  # type: ignore[arg-type]

            broker.logs.get_or_create = get_or_create  # type: ignore[method-assign]
            await broker.topics.create("late", 1, 1, {})
            assert "late" in broker.image.topics and broker.replicas.get("late", 0) is None
            monkeypatch.setattr(LogDirFailureChannel, "_has_room", staticmethod(lambda _d, _n: True))
            with pytest.raises(KafkaError) as info:
                broker.services.partitions.for_produce("late", 0)
            assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
            full["on"] = False
            p = broker.services.partitions.for_produce("late", 0)
            assert broker.replicas.append(p, _batch(0), 1).first_offset == 0

    asyncio.run(main())
