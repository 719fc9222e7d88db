"""A producer's open batch: records appended one at a time, then built into a v2 batch.

Three classes, compiled (:mod:`odradek.records._speedups`) when the extension is built and
not turned off, pure Python otherwise, with the same interface:

* ``Pool(limit)`` - the bytes buffered by all of one producer's batches (``buffer.memory``):
  ``buffered``, ``limit``, ``add(n)``.
* ``Receipt(batch, index, timestamp, ksize, vsize)`` - one appended record; the producer's
  ``FutureRecordMetadata`` subclasses it (attributes ``_batch``, ``_index``, ``_timestamp``,
  ``_ksize``, ``_vsize``).
* ``Appender(capacity, max_record, pool, batch, receipt_type)`` - the records of one batch:

  - ``append(timestamp, key, value, headers, size) -> index``: any record (``headers`` is
    the encoded headers section from :func:`~odradek.records.v2.encode_headers`, or None);
    ``size`` is what the record counts against the batch and the pool.
  - ``try_append(value) -> receipt | None``: a record with only a value, stamped now, unless
    the appender is closed, the record would fill it to ``capacity`` or the pool beyond its
    limit, or it is larger than ``max_record``. The compiled one does it atomically under the
    GIL, so a producer can call it without its lock; the pure one always answers None (the
    producer's general path then appends under the lock).
  - ``close()``, ``closed``, ``record_count``, ``size``, ``first_timestamp`` (None when
    empty), ``max_timestamp`` (-1 when empty), ``records()`` (the records section),
    ``release()`` (close and free the records once the batch is built).

:func:`build` turns an appender's records into the batch bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from . import speedups
from ._types import NO_TIMESTAMP
from ._varint import ENCODED_NONNEG, ENCODED_SIGNED, encode_varint, encode_varlong
from .compression import Compression
from .v2 import assemble_batch

__all__ = ["Appender", "Pool", "Receipt", "build"]

_join = b"".join


class PyPool:
    """Pure-Python :class:`Pool` (mutated only under the producer's lock)."""

    __slots__ = ("buffered", "limit")

    def __init__(self, limit: int) -> None:
        self.buffered = 0
        self.limit = limit

    def add(self, n: int) -> None:
        self.buffered += n


class PyReceipt:
    """Pure-Python :class:`Receipt`."""

    __slots__ = ("_batch", "_index", "_ksize", "_timestamp", "_vsize")

    def __init__(self, batch: object, index: int, timestamp: int, ksize: int, vsize: int) -> None:
        #: the producer's batch: opaque here (a producer's subclass declares its type)
        self._batch = batch
        self._index = index
        self._timestamp = timestamp
        self._ksize = ksize
        self._vsize = vsize


_R = TypeVar("_R", bound=PyReceipt)


class PyAppender(Generic[_R]):
    """Pure-Python :class:`Appender` (``try_append`` always declines)."""

    __slots__ = ("_bodies", "_pool", "closed", "first_timestamp", "max_timestamp", "record_count", "size")

    def __init__(self, capacity: int, max_record: int, pool: PyPool, batch: object, receipt_type: type[_R]) -> None:
        self._pool = pool
        self._bodies: list[bytes] = []
        self.closed = False
        self.record_count = 0
        self.size = 0
        self.first_timestamp: int | None = None
        self.max_timestamp = -1

    def append(self, timestamp: int, key: bytes | None, value: bytes | None, headers: bytes | None, size: int) -> int:
        if self.closed:
            raise ValueError("the batch is closed")
        first = self.first_timestamp
        if first is None:
            first = self.first_timestamp = int(timestamp)
        tsd = timestamp - first
        od = self.record_count
        odv = ENCODED_NONNEG[od] if od < 8192 else encode_varint(od)
        tsv = ENCODED_SIGNED[tsd + 8192] if -8192 <= tsd < 8192 else encode_varlong(tsd)
        if key is None:
            kv, key = b"\x01", b""
        else:
            n = len(key)
            kv = ENCODED_NONNEG[n] if n < 8192 else encode_varint(n)
        if value is None:
            vv, value = b"\x01", b""
        else:
            n = len(value)
            vv = ENCODED_NONNEG[n] if n < 8192 else encode_varint(n)
        self._bodies.append(_join((b"\x00", tsv, odv, kv, key, vv, value, headers or b"\x00")))
        self.record_count = od + 1
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self.size += size
        self._pool.add(size)
        return od

    def try_append(self, value: bytes) -> _R | None:
        return None

    def close(self) -> None:
        self.closed = True

    def records(self) -> bytes:
        parts: list[bytes] = []
        for body in self._bodies:
            n = len(body)
            parts.append(ENCODED_NONNEG[n] if n < 8192 else encode_varint(n))
            parts.append(body)
        return _join(parts)

    def release(self) -> None:
        self.closed = True
        self._bodies = []


if TYPE_CHECKING or speedups.compiled is None:
    # the compiled classes have the same interface (``_speedups.pyi``; the tests run both), so
    # they are typed as the pure-Python ones
    Pool = PyPool
    Receipt = PyReceipt
    Appender = PyAppender
else:
    from ._speedups import Appender, Pool, Receipt


def build(
    appender: PyAppender[_R],
    compression: Compression | int = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """The v2 batch of an appender's records (offsets from 0; the broker assigns them)."""
    count = appender.record_count
    first = appender.first_timestamp
    return assemble_batch(
        appender.records(),
        count,
        max(count - 1, 0),
        NO_TIMESTAMP if first is None else first,
        appender.max_timestamp,
        attributes=int(compression),
        compression_level=compression_level,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
