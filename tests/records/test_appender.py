"""The producer's open batch (``odradek.records.appender``): the compiled Appender against the
pure-Python one, and the refusals of the compiled ``try_append`` (the lock-free send path)."""

from __future__ import annotations

import gc
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import Compression, appender, read_batches, speedups
from odradek.records.v2 import encode_headers

needs_compiled = pytest.mark.skipif(speedups.compiled is None, reason="the compiled record code is turned off")

IMPLEMENTATIONS = [pytest.param((appender.PyPool, appender.PyReceipt, appender.PyAppender), id="pure")]
if speedups.compiled is not None:
    c = speedups.compiled
    IMPLEMENTATIONS.append(pytest.param((c.Pool, c.Receipt, c.Appender), id="compiled"))

blobs = st.none() | st.binary(max_size=9000)
header = st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=200))
records = st.lists(
    st.tuples(st.integers(-(10**9), 10**9), blobs, blobs, st.lists(header, max_size=3)), min_size=1, max_size=40
)


def _fill(impl: tuple, recs: list) -> tuple[object, object, list[int]]:
    pool_t, receipt_t, appender_t = impl
    pool = pool_t(1 << 40)
    acc = appender_t(1 << 40, 1 << 40, pool, object(), receipt_t)
    base = 1_700_000_000_000
    indexes = [
        acc.append(base + tsd, k, v, encode_headers(hs) if hs else None, (len(k or b"") + len(v or b"") + 32))
        for tsd, k, v, hs in recs
    ]
    return pool, acc, indexes


@settings(max_examples=60, deadline=None)
@given(recs=records, codec=st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD]))
def test_both_appenders_build_the_same_batch_and_it_reads_back(recs: list, codec: Compression) -> None:
    built = []
    for param in IMPLEMENTATIONS:
        pool, acc, indexes = _fill(param.values[0], recs)
        assert indexes == list(range(len(recs)))
        assert acc.record_count == len(recs)
        size = sum(len(k or b"") + len(v or b"") + 32 for _, k, v, _ in recs)
        assert acc.size == size and pool.buffered == size
        built.append((acc.records(), appender.build(acc, codec, producer_id=7, producer_epoch=1, base_sequence=5)))
    assert all(b == built[0] for b in built)
    (batch,) = list(read_batches(built[0][1], strict=True))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 5)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    base = 1_700_000_000_000
    assert got == [(i, base + tsd, k, v, hs) for i, (tsd, k, v, hs) in enumerate(recs)]
    assert batch.max_timestamp == base + max(tsd for tsd, *_ in recs)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_closed_appender_takes_nothing(impl: tuple) -> None:
    pool, acc, _ = _fill(impl, [(0, None, b"v", [])])
    acc.close()
    assert acc.closed
    with pytest.raises(ValueError, match="closed"):
        acc.append(1, None, b"x", None, 33)
    assert acc.try_append(b"x") is None
    assert acc.record_count == 1 and pool.buffered == 33


@needs_compiled
def test_try_append_stamps_now_and_makes_the_receipt_type_asked_for() -> None:
    c = speedups.compiled

    class Future(c.Receipt):
        __slots__ = ()

    marker = object()
    pool = c.Pool(10_000)
    acc = c.Appender(1000, 500, pool, marker, Future)
    before = time.time_ns() // 1_000_000
    r = acc.try_append(b"v" * 10)
    after = time.time_ns() // 1_000_000
    assert type(r) is Future
    assert r._batch is marker and r._index == 0 and r._ksize == -1 and r._vsize == 10
    assert before <= r._timestamp <= after
    assert acc.try_append(b"w")._index == 1
    assert acc.size == 42 + 33 and pool.buffered == 75
    (batch,) = list(read_batches(appender.build(acc), strict=True))
    assert [(rec.offset, rec.key, rec.value) for rec in batch] == [(0, None, b"v" * 10), (1, None, b"w")]
    assert batch.base_timestamp == r._timestamp


@needs_compiled
@pytest.mark.parametrize(
    ("value", "capacity", "limit", "max_record", "why"),
    [
        ("text", 1000, 1000, 1000, "not bytes: the general path serializes it"),
        (None, 1000, 1000, 1000, "a null value takes the general path"),
        (bytearray(b"v"), 1000, 1000, 1000, "only exactly bytes"),
        (b"v" * 68, 100, 1000, 1000, "it would fill the batch to batch.size: the general path closes it"),
        (b"v" * 50, 1000, 81, 1000, "the pool (buffer.memory) would overflow: the general path waits"),
        (b"v" * 50, 1000, 1000, 121, "larger than max.request.size: the general path raises"),
    ],
)
def test_try_append_declines_and_changes_nothing(value: object, capacity: int, limit: int, max_record: int, why: str) -> None:
    c = speedups.compiled
    pool = c.Pool(limit)
    acc = c.Appender(capacity, max_record, pool, object(), c.Receipt)
    assert acc.try_append(value) is None, why
    assert acc.record_count == 0 and acc.size == 0 and pool.buffered == 0 and acc.records() == b""
    assert acc.first_timestamp is None


@needs_compiled
def test_receipts_keep_their_batch_and_appenders_are_collected() -> None:
    c = speedups.compiled

    class Batch:
        acc: object = None

    batch = Batch()
    pool = c.Pool(1 << 20)
    batch.acc = c.Appender(1 << 20, 1 << 20, pool, batch, c.Receipt)
    receipts = [batch.acc.try_append(b"x") for _ in range(100)]
    assert all(r._batch is batch for r in receipts)
    batch.acc.release()  # the producer releases it once built: records freed, cycle broken
    assert batch.acc.closed and batch.acc.records() == b"" and batch.acc.record_count == 100
    del batch
    gc.collect()
    assert receipts[50]._batch.acc.record_count == 100  # the receipt still holds its batch

    # a cycle never released is collected
    class Holder:
        acc: object = None

    h = Holder()
    h.acc = c.Appender(1 << 20, 1 << 20, pool, h, c.Receipt)
    import weakref

    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None
