"""The compiled record decoder (``odradek.records._speedups``) against the pure-Python one.

Both decode the same random batches to the same records and Arrow columns; damaged data gives
the same outcome (the compiled decoder hands anything it doubts to the pure-Python one, which
raises the precise error).  The install builds the extension, so the test environment has it:
a build that silently failed fails here.
"""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import CorruptRecordError, iter_batch_headers, speedups, v2
from odradek.records.v2 import BatchBuilder
from odradek.spark import _arrow

HEADER = 61

needs_compiled = pytest.mark.skipif(speedups.compiled is None, reason="the compiled decoder is turned off")


def test_the_compiled_decoder_is_built_and_used() -> None:
    if os.environ.get(speedups.PURE_PYTHON_ENV):
        assert speedups.implementation() == "pure-python"
        return
    assert speedups.implementation() == "compiled", "the C extension was not built (setup.py) or failed to import"
    assert v2._compiled is speedups.compiled and _arrow._compiled is speedups.compiled


keys = st.none() | st.binary(max_size=300)
header = st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=200))
records = st.lists(
    st.tuples(st.integers(-(10**6), 10**6), keys, keys, st.lists(header, max_size=3)), min_size=1, max_size=60
)


def _batch(recs: list[tuple[int, bytes | None, bytes | None, list]], gaps: bool, base_offset: int = 1000) -> bytes:
    b = BatchBuilder(base_offset=base_offset)
    od = 0
    for i, (tsd, k, v, hs) in enumerate(recs):
        od += 1 + (i % 3 if gaps else 0)
        b.append(1_700_000_000_000 + tsd, k, v, hs, offset_delta=od)
    return b.build()


def _pure_records(data: bytes, count: int, lat: int | None = None) -> list:
    h = next(iter(iter_batch_headers(data)))
    saved, v2._compiled = v2._compiled, None
    try:
        return v2.decode_records(data[HEADER:], count, h.base_offset, h.base_timestamp, lat)
    finally:
        v2._compiled = saved


@needs_compiled
@settings(max_examples=150, deadline=None)
@given(records, st.booleans(), st.booleans())
def test_records_are_decoded_alike(recs: list, gaps: bool, log_append: bool) -> None:
    data = _batch(recs, gaps)
    h = next(iter(iter_batch_headers(data)))
    lat = 1_800_000_000_000 if log_append else None
    compiled = v2.decode_records(data[HEADER:], len(recs), h.base_offset, h.base_timestamp, lat)
    assert all(type(r) is v2.Record for r in compiled)
    assert compiled == _pure_records(data, len(recs), lat)


def _columns(data: bytes, headers: bool, compiled: bool) -> pa.RecordBatch | None:
    saved = _arrow._compiled
    _arrow._compiled = speedups.compiled if compiled else None
    try:
        return _arrow.decode_partition_data(data, "t", 3, 0, 1 << 40, include_headers=headers).batch
    finally:
        _arrow._compiled = saved


@needs_compiled
@settings(max_examples=150, deadline=None)
@given(st.lists(records, min_size=1, max_size=3), st.booleans(), st.booleans())
def test_arrow_columns_are_decoded_alike(batches: list, gaps: bool, headers: bool) -> None:
    data = b""
    base = 0
    for recs in batches:
        data += _batch(recs, gaps, base_offset=base)
        base += 4 * len(recs)
    got = _columns(data, headers, compiled=True)
    want = _columns(data, headers, compiled=False)
    assert got is not None and want is not None
    got.validate(full=True)
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()


@needs_compiled
@settings(max_examples=60, deadline=None)
@given(st.lists(records, min_size=1, max_size=3), st.booleans())
def test_columns_are_the_same_from_bytes_and_from_an_allocator(batches: list, headers: bool) -> None:
    """decode_columns fills bytes objects, or the buffers ``alloc`` gives (pyarrow's pool, reused
    instead of page-faulted in afresh): the same values either way, the data cut to its offsets."""
    data, base, specs = b"", 0, []
    for recs in batches:
        batch = _batch(recs, gaps=False, base_offset=base)
        specs.append((data + batch, len(data) + HEADER, len(data) + len(batch), len(recs), base, 1_700_000_000_000, None))
        data += batch
        base += len(recs)
    specs = [(data, *spec[1:]) for spec in specs]
    assert speedups.compiled is not None
    plain = speedups.compiled.decode_columns(specs, headers)
    pooled = speedups.compiled.decode_columns(specs, headers, pa.allocate_buffer)
    n = plain[0]
    assert pooled[0] == n
    assert all(type(x) is pa.Buffer for x in (pooled[1], pooled[2], pooled[3][0], pooled[3][1], pooled[4][1]))
    assert bytes(pooled[1]) == plain[1] and bytes(pooled[2]) == plain[2]
    for col in (3, 4):
        as_buffers = tuple(pa.py_buffer(x) if isinstance(x, bytes) else x for x in plain[col])
        got, want = _arrow._compiled_binary(n, pooled[col]), _arrow._compiled_binary(n, as_buffers)  # type: ignore[arg-type]
        got.validate(full=True)
        assert got.to_pylist() == want.to_pylist()
        assert got.buffers()[2].size == len(plain[col][1])  # cut to the bytes the offsets use


@needs_compiled
def test_a_bad_allocator_is_an_error_not_a_crash() -> None:
    data = _batch([(0, b"k", b"v" * 50, [])] * 20, gaps=False)
    spec = (data, HEADER, len(data), 20, 0, 1_700_000_000_000, None)
    assert speedups.compiled is not None
    with pytest.raises(ValueError, match="smaller"):
        speedups.compiled.decode_columns([spec], False, lambda size: bytearray(max(size - 1, 0)))
    with pytest.raises((TypeError, BufferError)):
        speedups.compiled.decode_columns([spec], False, lambda size: bytes(size))  # read-only
    with pytest.raises(ZeroDivisionError):
        speedups.compiled.decode_columns([spec], False, lambda size: 1 // 0)


@needs_compiled
@pytest.mark.parametrize("seed", range(40))
def test_damaged_records_give_the_same_outcome(seed: int) -> None:
    rng = random.Random(seed)
    recs = [
        (rng.randrange(-500, 500), rng.choice([None, b"k%d" % i]), rng.randbytes(rng.randrange(0, 200)), [("h", b"v")] * (i % 2))
        for i in range(30)
    ]
    data = bytearray(_batch(recs, gaps=False))
    body = len(data) - HEADER
    for _ in range(rng.randrange(1, 4)):  # flip bytes of the records, or cut them short
        at = HEADER + rng.randrange(body)
        data[at] = rng.randrange(256)
    if rng.random() < 0.3:
        del data[HEADER + rng.randrange(body) :]
    h = next(iter(iter_batch_headers(bytes(data[:HEADER]) + bytes(body))))

    def outcome(compiled: bool) -> object:
        saved, v2._compiled = v2._compiled, (speedups.compiled if compiled else None)
        try:
            return v2.decode_records(bytes(data[HEADER:]), len(recs), h.base_offset, h.base_timestamp)
        except Exception as exc:  # the error, by type and message
            return (type(exc), str(exc))
        finally:
            v2._compiled = saved

    assert outcome(True) == outcome(False)


@needs_compiled
def test_invalid_utf8_header_keys_fall_back_to_the_precise_error() -> None:
    data = bytearray(_batch([(0, b"k", b"v", [("hé", b"x")])], gaps=False))
    at = data.index("hé".encode())
    data[at + 1] = 0xFF  # broken UTF-8 inside the header key
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        v2.decode_records(bytes(data[HEADER:]), 1, 1000, 1_700_000_000_000)
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        _arrow.decode_partition_data(bytes(data), "t", 0, 0, 1 << 40, include_headers=True, verify_crc=False)


@needs_compiled
@settings(max_examples=100, deadline=None)
@given(records, st.sampled_from([0, 1, 2, 3, 4]))
def test_consumer_records_are_built_alike(recs: list, codec: int) -> None:
    from odradek.client.consumer_simple import ConsumerRecord
    from odradek.records import read_batches

    b = BatchBuilder(base_offset=7, compression=codec)
    for tsd, k, v, hs in recs:
        b.append(1_700_000_000_000 + tsd, k, v, hs)
    data = b.build()
    (batch,) = read_batches(data)
    got = batch.compiled_records(ConsumerRecord, "t", 2, 0)
    assert got is not None and all(type(r) is ConsumerRecord for r in got)
    saved, v2._compiled = v2._compiled, None
    try:
        (pure,) = read_batches(data)
        want = [ConsumerRecord("t", 2, r.offset, r.timestamp, 0, r.key, r.value, r.headers) for r in pure.records]
    finally:
        v2._compiled = saved
    assert got == want


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**40), 2**40), st.integers(1, 2**31 - 1), keys, keys)
def test_record_bodies_are_encoded_alike(tsd: int, od: int, key: bytes | None, value: bytes | None) -> None:
    compiled = speedups.compiled.encode_record_body(tsd, od, key, value)  # type: ignore[union-attr]
    saved, v2._encode_body = v2._encode_body, None
    try:
        b = BatchBuilder()
        b.append(1_700_000_000_000, None, None)  # the first record sets the base timestamp
        b.append(1_700_000_000_000 + tsd, key, value, offset_delta=od)
    finally:
        v2._encode_body = saved
    assert compiled == b._bodies[-1]


@needs_compiled
def test_records_without_headers_are_not_tracked_by_the_cycle_collector() -> None:
    """A fetch decodes thousands of records at once; the collection after it would walk them all.
    Records without headers (nothing in them can refer back) are left out of it; records with
    headers are tracked as usual, and both decode to what the pure-Python decoder gives."""
    import gc

    from odradek.client.consumer_simple import ConsumerRecord
    from odradek.records import TimestampType, read_batches

    b = BatchBuilder()
    b.append(1_700_000_000_000, None, b"plain")
    b.append(1_700_000_000_001, b"k", b"with", [("h", b"v")])
    (batch,) = list(read_batches(b.build()))
    plain, with_headers = batch.compiled_records(ConsumerRecord, "t", 0, TimestampType.CREATE_TIME)
    assert not gc.is_tracked(plain) and not gc.is_tracked(plain.headers)
    assert gc.is_tracked(with_headers) and gc.is_tracked(with_headers.headers)
    assert (plain.offset, plain.value, plain.headers) == (0, b"plain", [])
    assert (with_headers.key, with_headers.headers) == (b"k", [("h", b"v")])
    assert [r[2:] for r in _pure_records(b.build(), 2)] == [(None, b"plain", []), (b"k", b"with", [("h", b"v")])]
