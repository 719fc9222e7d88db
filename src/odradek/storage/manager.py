"""The logs of a broker across its ``log.dirs``: loading, creation, checkpoints, shutdown.

Each log dir holds one directory per partition plus Kafka's broker-level files:
``meta.properties`` (broker id, cluster id), the offset checkpoints
(``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``) and, after a clean shutdown,
the ``.kafka_cleanshutdown`` marker that lets the next start skip recovery.

Every log dir is locked for the life of the manager, as Kafka does: an exclusive ``flock`` on
``<dir>/.lock``, which holds the PID of its holder.  A second process on the same dir gets
:class:`LogDirLockedError` naming that PID; the lock is released by :meth:`LogManager.shutdown` /
:meth:`LogManager.close` (and by the kernel when the process dies).  Within one process the lock
is shared (counted), so a test can reopen a dir it "crashed" without closing.

The manager schedules nothing itself: the broker calls :meth:`LogManager.cleanup` and
:meth:`LogManager.checkpoint` from its own timers and flushes each log when its flush rules
(:meth:`Log.flush_messages_due`, :meth:`Log.flush_time_due`) say so (``flush_inline=False``),
and may pass ``parallel_map`` (e.g. a thread pool's ``map``) to load partitions in parallel.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from odradek._clock import Clock, SystemClock
from odradek.storage import cleaner
from odradek.storage.checkpoint import (
    CLEANER_OFFSET,
    LOG_START_OFFSET,
    RECOVERY_POINT,
    REPLICATION_OFFSET,
    read_offsets,
    write_atomic,
    write_offsets,
)
from odradek.storage.config import LogConfig
from odradek.storage.errors import LogDirLockedError, StorageError
from odradek.storage.files import OS_FILES, FileOps
from odradek.storage.log import Log, parse_partition_dir

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOCK_FILE",
    "LogManager",
    "kafka_uuid",
    "lock_log_dir",
    "parse_kafka_uuid",
    "read_meta_properties",
    "unlock_log_dir",
    "write_meta_properties",
]

_log = logging.getLogger("odradek.storage.manager")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
#: a future replica's staging directory in its target log dir (``<id>-future/<topic>-<partition>``,
#: a move between log dirs, Kafka's future log) and an old one's name once replaced
FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"
#: partitions a start-up worker loads per task
_LOAD_CHUNK = 64

ParallelMap = Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]]


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's text form of a UUID: URL-safe base64 of its 16 bytes, no padding (22 chars)."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


def parse_kafka_uuid(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    except (ValueError, TypeError) as exc:
        raise StorageError(f"invalid Kafka UUID {text!r}") from exc


def _read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            continue
        props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


def read_meta_properties(log_dir: Path) -> dict[str, str]:
    path = log_dir / META_PROPERTIES
    return _read_properties(path) if path.exists() else {}


def write_meta_properties(log_dir: Path, broker_id: int, cluster_id: str) -> None:
    write_atomic(log_dir / META_PROPERTIES, f"version=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")


# log dirs this process holds locked: real path -> [descriptor, holders].  No mutex (storage
# uses no threads): two managers of one dir opened at the same moment in one process would at
# worst see the second one refused by the kernel's lock, as if it were another process.
_locks: dict[str, list[int]] = {}


def lock_log_dir(log_dir: Path) -> None:
    """Take the exclusive lock on ``log_dir`` (created if missing) for this process.

    Raises LogDirLockedError, naming the holder's PID, when another process holds it.
    Counted within a process: each call needs one :func:`unlock_log_dir`.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(log_dir)
    held = _locks.get(key)
    if held is not None:
        held[1] += 1
        return
    path = log_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        try:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        except OSError:
            holder = "unknown"
        os.close(fd)
        raise LogDirLockedError(
            f"log dir {log_dir} is locked by process {holder} ({path}): another broker is using it; "
            "stop that broker or give this one another log dir"
        ) from exc
    except BaseException:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # the lock is what counts; the PID is for the message of a second broker
    _locks[key] = [fd, 1]


def unlock_log_dir(log_dir: Path) -> None:
    """Release one hold of :func:`lock_log_dir`; the lock goes with the last one."""
    key = os.path.realpath(log_dir)
    held = _locks.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] > 0:
        return
    del _locks[key]
    os.close(held[0])  # closing the only descriptor releases the flock


class LogManager:
    """All partition logs of a broker."""

    def __init__(
        self,
        dirs: Iterable[str | Path],
        config: Mapping[str, Any] | LogConfig | None = None,
        *,
        clock: Clock | None = None,
        files: FileOps = OS_FILES,
        parallel_map: ParallelMap | None = None,
        flush_inline: bool = True,
    ) -> None:
        self.dirs = [Path(d) for d in dirs]
        #: passed to every :class:`Log`: False when the caller flushes by the logs' flush rules
        #: itself (a broker, from a worker thread)
        self.flush_inline = flush_inline
        if not self.dirs:
            raise StorageError("at least one log dir is needed")
        self.default_config = config if isinstance(config, LogConfig) else LogConfig.from_dict(config)
        self.clock = clock or SystemClock()
        self.files = files
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_dir: dict[tuple[str, int], Path] = {}
        self.clean_shutdown: dict[Path, bool] = {}
        self.cleaner_offsets: dict[tuple[str, int], int] = {}
        self._closed = False
        self._locked: list[Path] = []
        try:
            for d in self.dirs:
                lock_log_dir(d)
                self._locked.append(d)
            self._load_all(parallel_map or map)
        except BaseException:
            self._unlock()
            raise

    def _unlock(self) -> None:
        locked, self._locked = self._locked, []
        for d in locked:
            unlock_log_dir(d)

    # ------------------------------------------------------------------------------------
    def _load_all(self, parallel_map: ParallelMap) -> None:
        jobs: list[tuple[Path, Path, int, int, int, bool]] = []
        for d in self.dirs:
            # temp files of atomic writes a crash interrupted (the dir is locked: no writer runs)
            for leftover in d.iterdir():
                if leftover.name.endswith(".tmp") and leftover.is_file():
                    leftover.unlink(missing_ok=True)
            clean = (d / CLEAN_SHUTDOWN_FILE).exists()
            self.clean_shutdown[d] = clean
            recovery = read_offsets(d / RECOVERY_POINT)
            starts = read_offsets(d / LOG_START_OFFSET)
            hws = read_offsets(d / REPLICATION_OFFSET)
            self.cleaner_offsets.update(read_offsets(d / CLEANER_OFFSET))
            for child in sorted(d.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith(FUTURE_SUFFIX):
                    # a move between log dirs that did not finish: the partition's data is in
                    # its current dir; the copy is dropped (the move can be asked for again)
                    _log.warning("%s: an unfinished move between log dirs; its copy is removed", child)
                    _remove_tree(child)
                    continue
                if child.name.endswith(DELETE_SUFFIX):
                    # a log replaced by a move between log dirs, its removal cut short by a stop
                    _log.info("%s: a log replaced by a move between log dirs; removed", child)
                    _remove_tree(child)
                    continue
                parsed = parse_partition_dir(child.name)
                if parsed is None or child.name.endswith((".delete", "-delete")):
                    continue
                jobs.append(
                    (d, child, recovery.get(parsed, 0), starts.get(parsed, 0), hws.get(parsed, 0), clean)
                )

        def load(job: tuple[Path, Path, int, int, int, bool]) -> tuple[Path, Log]:
            d, child, rp, start, hw, clean = job
            log = Log(
                child,
                self.default_config,
                recovery_point=rp,
                log_start_offset=start,
                clean_shutdown=clean,
                clock=self.clock,
                files=self.files,
                flush_inline=self.flush_inline,
                cleaned_to=self.cleaner_offsets.get(parse_partition_dir(child.name) or ("", -1), 0),
            )
            log.advance_high_watermark(hw)
            return d, log

        total = len(jobs)
        unclean = sum(1 for job in jobs if not job[5])
        if total:
            _log.info(
                "loading %d partition logs from %d log dirs (%s)", total, len(self.dirs),
                f"{unclean} after an unclean shutdown: recovering them" if unclean else "clean shutdown",
            )

        def load_chunk(
            chunk: list[tuple[Path, Path, int, int, int, bool]],
        ) -> tuple[list[tuple[Path, Log]], Exception | None]:
            # a failure is returned, not raised: the caller waits for every chunk and closes
            # what the others opened (a map stops at the first exception while its other
            # workers go on opening files, and those descriptors would never be closed)
            loaded: list[tuple[Path, Log]] = []
            try:
                for job in chunk:
                    loaded.append(load(job))
            except Exception as exc:
                return loaded, exc
            return loaded, None

        # the workers take chunks of partitions: one task per partition spent more time handing
        # tasks between threads than loading a clean partition takes (10,000 partitions: 1.5 s)
        chunks = [jobs[i : i + _LOAD_CHUNK] for i in range(0, total, _LOAD_CHUNK)]
        step = max(total // 10, 100)  # a progress line per tenth, for starts that take a while
        done = reported = 0
        failure: Exception | None = None
        for loaded, error in parallel_map(load_chunk, chunks):
            for d, log in loaded:
                key = (log.topic, log.partition)
                self._logs[key] = log
                self._log_dir[key] = d
            failure = failure or error
            done += len(loaded)
            if failure is None and done - reported >= step and done < total:
                reported = done
                _log.info("loaded %d of %d partition logs (%d%%)", done, total, done * 100 // total)
        if failure is not None:
            # nothing stays open (the caller may need descriptors to report the failure), and
            # nothing is written: the files stay as they were for the next start
            logs, self._logs, self._log_dir = list(self._logs.values()), {}, {}
            for log in logs:
                log.abandon()
            raise failure
        # from now on a crash is an unclean shutdown; the removal must be durable, or a power cut
        # could bring the marker back and the next start would skip recovery of a torn tail
        for d in self.dirs:
            marker = d / CLEAN_SHUTDOWN_FILE
            if marker.exists():
                self.files.remove(marker)
                self.files.sync_dir(d)

    # ------------------------------------------------------------------------------------
    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create(
        self,
        topic: str,
        partition: int,
        config: Mapping[str, Any] | LogConfig | None = None,
        topic_id: uuid.UUID | None = None,
        log_dir: Path | None = None,
    ) -> Log:
        """The partition's log, created if new: in ``log_dir`` when it is one of the manager's
        (AlterReplicaLogDirs asked for it before the partition came), else in the log dir with the
        fewest partitions."""
        key = (topic, partition)
        log = self._logs.get(key)
        cfg = self._config(config)
        if log is not None:
            if config is not None:
                log.update_config(cfg)
            return log
        [target] = [log_dir] if log_dir is not None and log_dir in self.dirs else self.place([key])
        log = self.create_unregistered(topic, partition, cfg, topic_id, target)
        self.register(log, target)
        return log

    # creating logs in two steps: a caller with an event loop does the file work of many new
    # partitions on a worker thread (directories, files, fsyncs: milliseconds each) and registers
    # them on its own thread, where every other reader of the manager runs
    def place(self, keys: Iterable[tuple[str, int]]) -> list[Path]:
        """The log dir of each new partition: the one with the fewest partitions, counting the
        ones placed before it."""
        counts = {d: 0 for d in self.dirs}
        for d in self._log_dir.values():
            counts[d] += 1
        targets = []
        for _key in keys:
            target = min(self.dirs, key=lambda d: counts[d])
            counts[target] += 1
            targets.append(target)
        return targets

    def create_unregistered(
        self,
        topic: str,
        partition: int,
        config: Mapping[str, Any] | LogConfig | None,
        topic_id: uuid.UUID | None,
        target: Path,
        *,
        sync_parent: bool = True,
    ) -> Log:
        """A new partition's log in ``target``, files and all, not yet known to the manager (see
        :meth:`register`); safe on any thread while no one else creates the same partition.
        ``sync_parent=False`` leaves the fsync of ``target`` (which makes the log's directory
        durable) to the caller: one for many logs created together."""
        log = Log(
            target / f"{topic}-{partition}", self._config(config), clean_shutdown=True, clock=self.clock,
            files=self.files, flush_inline=self.flush_inline,
        )
        try:
            if topic_id is not None:
                self.set_topic_id(log, topic_id)
            if sync_parent:
                self.files.sync_dir(target)
        except BaseException:
            log.abandon()
            raise
        return log

    def register(self, log: Log, target: Path) -> None:
        """Make a log from :meth:`create_unregistered` one of the manager's."""
        key = (log.topic, log.partition)
        if key in self._logs:
            raise StorageError(f"{log.topic}-{log.partition} has a log already")
        self._logs[key] = log
        self._log_dir[key] = target

    def _config(self, config: Mapping[str, Any] | LogConfig | None) -> LogConfig:
        if isinstance(config, LogConfig):
            return config
        if not config:
            return self.default_config
        merged = self.default_config.to_dict()
        merged.update(config)
        return LogConfig.from_dict(merged)

    def logs(self) -> Iterator[Log]:
        return iter(list(self._logs.values()))

    def __len__(self) -> int:
        return len(self._logs)

    def delete(self, topic: str, partition: int) -> bool:
        self.cleaner_offsets.pop((topic, partition), None)
        log = self._logs.pop((topic, partition), None)
        self._log_dir.pop((topic, partition), None)
        if log is None:
            return False
        segments, size, end = len(log.segments), log.size_bytes, log.log_end_offset
        log.delete()
        _log.info(
            "deleted the log of %s-%d: %s (%d segments, %d bytes, offsets up to %d)",
            topic, partition, log.directory, segments, size, end - 1,
        )
        return True

    # -- moves between log dirs (AlterReplicaLogDirs) --------------------------------------
    def dir_of(self, topic: str, partition: int) -> Path | None:
        """The log dir holding the partition's log (None: no log)."""
        return self._log_dir.get((topic, partition))

    def create_future(self, current: Log, target: Path) -> Log:
        """A future replica of ``current`` in log dir ``target``: an empty log, not registered, in a
        staging directory of ``target``, starting at ``current``'s log start offset (with its
        topic id); filled by the caller and put in place by :meth:`replace_with_future`."""
        if target not in self.dirs:
            raise StorageError(f"{target} is not one of this broker's log dirs")
        staging = target / f"{uuid.uuid4().hex}{FUTURE_SUFFIX}"
        future = Log(
            staging / current.directory.name, current.config, clean_shutdown=True, clock=self.clock,
            files=self.files, flush_inline=self.flush_inline,
        )
        try:
            topic_id = self.topic_id(current)
            if topic_id is not None:
                self.set_topic_id(future, topic_id)
            future.truncate_fully_and_start_at(current.log_start_offset)
            self.files.sync_dir(target)
        except BaseException:
            future.delete()
            _remove_tree(staging)
            raise
        return future

    def drop_future(self, future: Log) -> None:
        """Close and remove a future replica that will not be used."""
        future.delete()
        _remove_tree(future.directory.parent)

    def replace_with_future(self, future: Log) -> tuple[Log, Log, Path]:
        """Put a caught-up future replica in place of the partition's current log: the current
        log flushed, its directory renamed ``<name>.<id>-delete``, the future's moved to
        ``<target>/<topic>-<partition>`` and opened there (high watermark and log start offset
        carried over).  Returns ``(new log, old log, old directory)``: the old log's files stay
        open (reads in flight keep working) until the caller closes it with ``abandon()`` and
        removes the old directory.  The caller makes sure nothing appends to either log meanwhile
        (the broker calls this on its event loop, where appends run)."""
        key = (future.topic, future.partition)
        current = self._logs[key]
        if future.log_end_offset != current.log_end_offset:
            raise StorageError(
                f"{future.topic}-{future.partition}: the future replica ends at {future.log_end_offset}, "
                f"the current log at {current.log_end_offset}"
            )
        staging = future.directory.parent
        target = staging.parent
        name = current.directory.name
        hw, start = current.high_watermark, current.log_start_offset
        with current._lock:  # no retention or compaction pass of the old log in between
            current.flush()
            future.take_producer_snapshot()
            future.close()
            old = current.directory.with_name(f"{name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
            os.rename(current.directory, old)
            os.rename(future.directory, target / name)
            staging.rmdir()
            self.files.sync_dir(old.parent)
            self.files.sync_dir(target)
            new = Log(
                target / name, current.config, recovery_point=future.log_end_offset, log_start_offset=start,
                clean_shutdown=True, clock=self.clock, files=self.files, flush_inline=self.flush_inline,
                cleaned_to=self.cleaner_offsets.get(key, 0),
            )
            new.advance_high_watermark(min(hw, new.log_end_offset))
            self._logs[key] = new
            self._log_dir[key] = target
        _log.info("%s-%d moved from log dir %s to %s (offsets %d to %d)", *key, old.parent, target,
                  start, new.log_end_offset)
        return new, current, old

    # -- identity ------------------------------------------------------------------------
    @staticmethod
    def set_topic_id(log: Log, topic_id: uuid.UUID) -> None:
        write_atomic(log.directory / PARTITION_METADATA, f"version: 0\ntopic_id: {kafka_uuid(topic_id)}\n")

    @staticmethod
    def topic_id(log: Log) -> uuid.UUID | None:
        try:  # read for every partition at start-up: no exists() first
            text = _read_properties(log.directory / PARTITION_METADATA).get("topic_id")
        except FileNotFoundError:
            return None
        return parse_kafka_uuid(text) if text else None

    # -- background work -------------------------------------------------------------------
    def cleanup(self, now_ms: int | None = None) -> int:
        """Retention for every log; returns the number of segments removed."""
        removed = 0
        for log in self.logs():
            if not log.closed:
                removed += log.delete_old_segments(now_ms)
                log.delete_pending()
        return removed

    def clean(self, now_ms: int | None = None) -> list[cleaner.CleanResult]:
        """One compaction pass over every compacted log whose dirty ratio reached
        ``min.cleanable.dirty.ratio``; updates ``cleaner-offset-checkpoint``."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        results = []
        for log in self.logs():
            if log.closed or not log.config.compact:
                continue
            key = (log.topic, log.partition)
            first = max(self.cleaner_offsets.get(key, 0), log.log_start_offset)
            if cleaner.dirty_ratio(log, first, now) < log.config.min_cleanable_dirty_ratio:
                continue
            result = cleaner.clean(log, first, now)
            self.cleaner_offsets[key] = result.first_dirty_offset
            results.append(result)
        if results:
            self._write_cleaner_checkpoint()
        return results

    def _write_cleaner_checkpoint(self) -> None:
        for d in self.dirs:
            mine = {k: o for k, o in self.cleaner_offsets.items() if self._log_dir.get(k) == d}
            write_offsets(d / CLEANER_OFFSET, mine)

    def checkpoint(self) -> None:
        """Write recovery points, log start offsets and high watermarks of every log dir."""
        for d in self.dirs:
            mine = [(k, log) for k, log in self._logs.items() if self._log_dir[k] == d]
            write_offsets(d / RECOVERY_POINT, {k: log.recovery_point for k, log in mine})
            write_offsets(d / LOG_START_OFFSET, {k: log.log_start_offset for k, log in mine})
            write_offsets(d / REPLICATION_OFFSET, {k: log.high_watermark for k, log in mine})

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker."""
        if self._closed:
            return
        try:
            for log in self.logs():
                log.close()
            self.checkpoint()
            for d in self.dirs:
                write_atomic(d / CLEAN_SHUTDOWN_FILE, "")
            self._closed = True
        finally:
            self._unlock()

    def close(self) -> None:
        """Close every log and release the log dirs without a clean-shutdown marker (the next
        start recovers); for a manager given up after an error."""
        if self._closed:
            return
        self._closed = True
        try:
            for log in self.logs():
                log.close()
        finally:
            self._unlock()


def _remove_tree(path: Path) -> None:
    """Remove a directory and what is in it (a future replica's staging dir, an old log's dir)."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
