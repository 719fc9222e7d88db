"""The broker's table writers: one per partition it leads of a topic with ``odradek.iceberg.mode`` on.

The service looks at the partitions this broker hosts whenever the metadata changes (a partition
became leader or follower, a topic's configs changed) and every ``_TICK_MS``: a partition it leads
of a topic that asks for a table gets a :class:`~odradek.tables.writer.PartitionWriter`; one it no
longer leads (or whose topic turned the mode off) loses it.  Each writer's steps run on the
service's own threads, never on the event loop, every ``odradek.iceberg.commit.interval.ms`` (at
once again while the log has more than a step reads).  A failing step (the catalog unreachable, a
full disk) is logged and retried after the interval: the writer resumes from the table's record.

Lag, per partition: records behind the high watermark, and seconds since the writer was last
caught up with it (0 when it is).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import logging
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from odradek._clock import Clock
from odradek._scheduler import Scheduler
from odradek.settings import TableSettings
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

if TYPE_CHECKING:  # PyIceberg and pyarrow are imported when a topic asks for a table (odradek[tables])
    from odradek.tables.writer import LogSource, PartitionWriter

log = logging.getLogger(__name__)

__all__ = ["HostedPartition", "Lag", "LeaderLog", "TableWriters"]

#: how often the hosted partitions are looked at besides metadata changes
_TICK_MS = 1000
_THREADS = 2
_MAX_BACKOFF_MS = 60000
#: how long a writer's thread waits for a registry lookup on the event loop
_REGISTRY_TIMEOUT_S = 30


class HostedPartition(Protocol):
    """What the service needs of a partition the broker hosts."""

    @property
    def topic(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def is_leader(self) -> bool: ...


class LeaderLog:
    """A hosted partition's log as its writer reads it: ``read`` is the broker's read as a
    read_committed consumer (below the last stable offset; a failed log dir raises)."""

    def __init__(self, log: Log, read: Callable[[int, int], bytes], topic_id: str | None = None) -> None:
        self.log, self._read = log, read
        self.topic_id = topic_id

    def bounds(self) -> tuple[int, int, int]:
        lg = self.log
        return lg.log_start_offset, lg.last_stable_offset, lg.high_watermark

    def read(self, offset: int, max_bytes: int) -> bytes:
        return self._read(offset, max_bytes)

    def aborted(self, start: int, upper: int) -> list[tuple[int, int]]:
        return [(a.producer_id, a.first_offset) for a in self.log.aborted_transactions(start, upper)]


class _RegistryOnLoop:
    """The broker's registry view as a writer's thread reads it: the view changes on the event
    loop, so each lookup runs there (the thread waits for it).

    A broker that does not lead ``_schemas`` keeps its view only as current as its last catch-up
    (a registry read through its listener): a writer asking that view alone would not see a
    subject registered since (the table never created) or a new version (its records read with
    the old one).  So a writer's lookup starts with ``synced``: the view holding every write
    acknowledged so far, as the registry's own reads do."""

    def __init__(self, loop: asyncio.AbstractEventLoop, view: Callable[[], Any],
                 synced: Callable[[float], Coroutine[Any, Any, Any]] | None = None) -> None:
        self.loop, self.view, self.synced = loop, view, synced

    def _call(self, fn: Callable[[Any], Any]) -> Any:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                state = self.view()
                done.set_result(fn(state) if state is not None else None)
            except BaseException as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return done.result(timeout=_REGISTRY_TIMEOUT_S)

    def versions(self, subject: str) -> list[Any]:
        return self._call(lambda state: state.versions(subject)) or []

    def by_id(self, schema_id: int) -> Any:
        return self._call(lambda state: state.by_id(schema_id))

    def __call__(self) -> _RegistryOnLoop | None:
        """What the writers call for the registry (before their lookups): None while this broker
        has no view, or cannot bring it up to date."""
        if self.synced is not None:
            synced = self.synced
            state = asyncio.run_coroutine_threadsafe(synced(_REGISTRY_TIMEOUT_S / 2), self.loop).result(
                timeout=_REGISTRY_TIMEOUT_S)
            return self if state is not None else None
        return self if self._call(lambda state: True) else None


@dataclass(frozen=True, slots=True)
class Lag:
    records: int
    seconds: float
    written: int
    dead: int


class _Driver:
    """One writer and the task that runs its steps."""

    def __init__(self, key: tuple[str, int], writer: PartitionWriter, source: LogSource) -> None:
        self.key, self.writer, self.source = key, writer, source
        self.task: asyncio.Task[None] | None = None
        self.stopping = False
        self.in_step = False  # a step runs on the writers' threads (it may still commit)
        self.behind_since: float | None = None


class TableWriters:
    def __init__(
        self,
        settings: TableSettings,
        data_dir: Path,
        hosted: Callable[[], Iterable[HostedPartition]],
        source: Callable[[HostedPartition], LogSource],
        log_config: Callable[[str], LogConfig],
        registry: Callable[[], Any],
        timers: Scheduler,
        clock: Clock,
        registry_synced: Callable[[float], Coroutine[Any, Any, Any]] | None = None,
    ) -> None:
        """``registry``: the broker's registry view as it is; ``registry_synced(timeout)``: the view
        once it holds every acknowledged write (what a writer reads)."""
        self.settings, self.data_dir = settings, data_dir
        self.hosted, self.source, self.log_config, self.registry = hosted, source, log_config, registry
        self.registry_synced = registry_synced
        self.timers, self.clock = timers, clock
        self._drivers: dict[tuple[str, int], _Driver] = {}
        # drivers told to stop whose step is still running: they still write, so they are still
        # reported (an operator who turns a topic's mode off and sees no writer in /metrics can
        # count on nothing more being committed to its table)
        self._retiring: set[_Driver] = set()
        self._executor: ThreadPoolExecutor | None = None
        self._catalog: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._warned_missing = False

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick(), name="iceberg-writers")

    def _registry(self) -> _RegistryOnLoop:
        return _RegistryOnLoop(asyncio.get_running_loop(), self.registry, self.registry_synced)

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        drivers = list(self._drivers.values())
        self._drivers.clear()
        for d in drivers:
            self._retire(d)
        # a step in progress finishes its commit (or loses it: the table's record stays right)
        tasks = [d.task for d in drivers if d.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=30)
            for t in pending:
                t.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def on_image(self, _image: object) -> None:
        """Metadata changed: partitions may have become leader or follower, configs changed."""
        if not self._stopped:
            self.reconcile()

    async def _tick(self) -> None:
        while not self._stopped:
            self.reconcile()
            await self.timers.sleep(_TICK_MS)

    # -- which partitions have writers -------------------------------------------------------------

    def _mode(self, topic: str) -> tuple[str, LogConfig | None]:
        try:
            config = self.log_config(topic)
        except Exception:  # a topic being deleted
            return "off", None
        return config.odradek_iceberg_mode, config

    def reconcile(self) -> None:
        wanted: dict[tuple[str, int], tuple[HostedPartition, LogConfig]] = {}
        modes: dict[str, tuple[str, LogConfig | None]] = {}  # each topic's config looked up once
        for p in self.hosted():
            if not p.is_leader:
                continue
            found = modes.get(p.topic)
            if found is None:
                found = modes[p.topic] = self._mode(p.topic)
            mode, config = found
            if mode != "off" and config is not None:
                wanted[(p.topic, p.index)] = (p, config)
        for key in [k for k in self._drivers if k not in wanted]:
            self._retire(self._drivers.pop(key))
            log.info("Iceberg writer of %s-%d stops (no longer led here, or its topic's mode is off)", *key)
        if not wanted:
            return
        if importlib.util.find_spec("pyiceberg") is None or importlib.util.find_spec("pyarrow") is None:
            if not self._warned_missing:
                self._warned_missing = True
                log.error("topics %s ask for Iceberg tables (odradek.iceberg.mode) but PyIceberg is not installed: "
                          "install odradek[tables]; nothing is written", sorted({t for t, _ in wanted}))
            return
        from odradek.tables.writer import PartitionWriter

        for key, (p, config) in wanted.items():
            old = self._drivers.get(key)
            if old is not None and old.writer.mode == config.odradek_iceberg_mode:
                continue
            if old is not None:
                self._retire(old)
            source = self.source(p)
            writer = PartitionWriter(
                None, self.settings.namespace, key[0], key[1], config.odradek_iceberg_mode,
                config.odradek_iceberg_partition_spec, source, self._registry(),
            )
            d = self._drivers[key] = _Driver(key, writer, source)
            # a stopped writer of the partition may still be in its step: the new one starts after it
            before = [r.task for r in self._retiring if r.key == key and r.task is not None]
            d.task = asyncio.get_running_loop().create_task(self._drive(d, before), name=f"iceberg-{key[0]}-{key[1]}")
            log.info("Iceberg writer of %s-%d starts (%s mode)", key[0], key[1], config.odradek_iceberg_mode)

    def _retire(self, d: _Driver) -> None:
        """Stop ``d``: at once if it is waiting between steps, else once its step has ended (a
        step is not interrupted: it finishes its commit). It is reported until then."""
        d.stopping = True
        task = d.task
        if task is None or task.done():
            return
        self._retiring.add(d)
        task.add_done_callback(lambda _t: self._retiring.discard(d))
        if not d.in_step:
            task.cancel()

    # -- running a writer --------------------------------------------------------------------------

    def _catalog_now(self) -> Any:
        """The catalog, opened on first use (on a writer's thread)."""
        if self._catalog is None:
            from odradek.tables.catalog import open_catalog

            self._catalog = open_catalog(self.settings, self.data_dir)
        return self._catalog

    async def _run(self, fn: Callable[[], Any]) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(_THREADS, thread_name_prefix="iceberg")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _drive(self, d: _Driver, before: list[asyncio.Task[None]]) -> None:
        """Run ``d``'s steps until it is stopped; first wait for the tasks ``before`` it to end."""
        if before:
            await asyncio.wait(before)
        w = d.writer
        backoff = 0
        while not d.stopping and not self._stopped:
            interval = self._interval(w.topic)
            d.in_step = True
            try:
                if w.catalog is None:
                    w.catalog = await self._run(self._catalog_now)
                step = await self._run(w.step)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                d.in_step = False
                if d.stopping:
                    return
                # the same failure again (the catalog down for minutes) waits longer, up to a minute
                backoff = min(max(2 * backoff, interval, 1000), _MAX_BACKOFF_MS)
                log.warning("Iceberg writer of %s: %s: %s; retrying in %d ms", w.name, type(exc).__name__, exc, backoff,
                            exc_info=log.isEnabledFor(logging.DEBUG))
                w.table = w.dead_table = None  # reopened from the table's record
                await self.timers.sleep(backoff)
                continue
            d.in_step = False
            backoff = 0
            self._note_lag(d)
            if not step.more and not d.stopping:
                await self.timers.sleep(interval)

    def _interval(self, topic: str) -> int:
        _, config = self._mode(topic)
        return config.odradek_iceberg_commit_interval_ms if config is not None else 60000

    def _note_lag(self, d: _Driver) -> None:
        _, _, hw = d.source.bounds()
        if d.writer.next >= hw:
            d.behind_since = None
        elif d.behind_since is None:
            d.behind_since = self.clock.monotonic_ms() / 1000

    # -- what the writers report ------------------------------------------------------------------

    def lag(self) -> dict[tuple[str, int], Lag]:
        """Per partition written here: records and seconds behind the high watermark."""
        out = {}
        now = self.clock.monotonic_ms() / 1000
        retiring = [d for d in self._retiring if d.key not in self._drivers]
        for d in [*retiring, *self._drivers.values()]:
            key = d.key
            try:
                _, _, hw = d.source.bounds()
            except Exception:
                continue
            behind = max(0, hw - max(d.writer.next, 0)) if d.writer.next >= 0 else hw
            seconds = 0.0 if behind == 0 or d.behind_since is None else now - d.behind_since
            out[key] = Lag(behind, seconds, d.writer.written, d.writer.dead)
        return out

    def families(self) -> list[Any]:
        """The lag as Prometheus metric families (for the broker's /metrics)."""
        from prometheus_client.core import GaugeMetricFamily

        records = GaugeMetricFamily("odradek_iceberg_writer_lag_records",
                                    "Records of the partition not yet in its Iceberg table (to the high watermark)",
                                    labels=["topic", "partition"])
        seconds = GaugeMetricFamily("odradek_iceberg_writer_lag_seconds",
                                    "Seconds since the partition's Iceberg writer was last caught up (0: caught up)",
                                    labels=["topic", "partition"])
        for (topic, partition), lag in sorted(self.lag().items()):
            records.add_metric([topic, str(partition)], lag.records)
            seconds.add_metric([topic, str(partition)], lag.seconds)
        return [records, seconds]
