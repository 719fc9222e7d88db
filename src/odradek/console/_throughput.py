"""The console's own throughput figures: messages in per second, sampled from log end offsets.

Every ``interval`` seconds the sampler lists the latest offset of every partition (one
ListOffsets round through the Admin client) and keeps the sums per topic for ``window`` seconds
(15 minutes).  The rate between two samples is the growth of the end offsets over the time
between them (see :func:`_growth` for topics created or re-created in between).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from odradek.client import AdminError, AsyncAdmin
from odradek.errors import OdradekError

__all__ = ["Sample", "ThroughputSampler"]

log = logging.getLogger("odradek.console")


@dataclass(slots=True)
class Sample:
    monotonic: float
    wall_ms: int
    end_offsets: dict[tuple[str, int], int]  # (topic, partition) -> log end offset
    topics: set[str]


def _growth(a: Sample, b: Sample) -> dict[str, int]:
    """Messages appended per topic between two samples.  A topic new in ``b`` grew from 0 (it was
    created in between); a partition whose end went down (its topic deleted and created again)
    counts from 0 too."""
    out: dict[str, int] = {}
    for tp, end in b.end_offsets.items():
        topic = tp[0]
        if topic in a.topics:
            before = a.end_offsets.get(tp, 0)
            grown = end - before if end >= before else end
        else:
            grown = end
        out[topic] = out.get(topic, 0) + max(grown, 0)
    for topic in b.topics:
        out.setdefault(topic, 0)
    return out


class ThroughputSampler:
    def __init__(self, admin: AsyncAdmin, *, interval: float = 5.0, window: float = 900.0, timeout: float = 10.0) -> None:
        self.admin = admin
        self.interval = interval
        self.window = window
        self.timeout = timeout
        self.samples: deque[Sample] = deque(maxlen=max(int(window / interval) + 1, 2))
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-throughput")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.sample()
                self.last_error = None
            except (OdradekError, OSError) as exc:
                self.last_error = str(exc)
                log.debug("console: throughput sample failed: %s", exc)
            await asyncio.sleep(max(self.interval - (time.monotonic() - started), 0.1))

    async def sample(self) -> Sample:
        described = await self.admin.describe_topics(None, timeout=self.timeout)
        topics = {name: t for name, t in described.items() if not t.internal}  # not the groups' commits
        specs: dict[tuple[str, int], Any] = {
            (name, p.partition): "latest" for name, t in topics.items() for p in t.partitions
        }
        found: dict[tuple[str, int], Any] = {}
        if specs:
            try:
                found = await self.admin.list_offsets(specs, timeout=self.timeout)
            except AdminError as exc:  # a partition without a leader: the others still count
                found = exc.results
        ends = {tp: max(info.offset, 0) for tp, info in found.items()}
        if self.samples:  # a partition that did not answer this time keeps its last known end
            last = self.samples[-1]
            for tp in specs:
                if tp not in ends and tp in last.end_offsets:
                    ends[tp] = last.end_offsets[tp]
        s = Sample(time.monotonic(), int(time.time() * 1000), ends, set(topics))
        self.samples.append(s)
        return s

    def series(self) -> list[dict[str, Any]]:
        """``[{"t": wall ms, "messages": appended, "messages_per_s": rate}]``: one point per pair of
        consecutive samples (at the later one's time), oldest first."""
        out = []
        items = list(self.samples)
        for a, b in itertools.pairwise(items):
            dt = b.monotonic - a.monotonic
            if dt <= 0:
                continue
            grown = sum(_growth(a, b).values())
            out.append({"t": b.wall_ms, "messages": grown, "messages_per_s": round(grown / dt, 3)})
        return out

    def topic_rates(self) -> dict[str, float]:
        """Messages in per second of each topic over the last two samples (empty before that)."""
        if len(self.samples) < 2:
            return {}
        a, b = self.samples[-2], self.samples[-1]
        dt = b.monotonic - a.monotonic
        if dt <= 0:
            return {}
        return {t: n / dt for t, n in _growth(a, b).items()}
