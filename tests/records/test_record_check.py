"""The check of a batch's records against its header (``odradek.records.check``): the compiled
pass and the pure-Python one agree on everything, accept every batch a producer writes, and
find every lie (``lying.py``); the decoders a consumer uses refuse the same lies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import odradek.records as odr
from odradek.records import check, speedups
from odradek.records.check import RecordsCheck, check_records, check_records_python, problem_text
from odradek.records.v2 import BatchBuilder

from . import lying
from .records_helpers import PROFILE

needs_compiled = pytest.mark.skipif(speedups.compiled is None, reason="the compiled module is turned off")
#: the properties run once per kind of lie: fewer examples each
PER_KIND = settings(PROFILE, max_examples=min(PROFILE.max_examples, 40))


def _span(data: bytes) -> tuple[bytes, int, int, odr.BatchHeader]:
    h = next(iter(odr.iter_batch_headers(data)))
    if h.compression:
        return odr.decompress(h.compression, data[61:], magic=2), 0, 0, h
    return data, 61, len(data), h


def _both(data: bytes, *, sequential: bool = True) -> RecordsCheck:
    buf, start, stop, h = _span(data)
    stop = stop or len(buf)
    args = (buf, start, stop, h.record_count, h.base_timestamp, h.last_offset - h.base_offset)
    py = check_records_python(*args, sequential=sequential)
    if speedups.compiled is not None:
        assert RecordsCheck._make(speedups.compiled.check_records(*args, sequential)) == py
    assert check_records(*args, sequential=sequential) == py
    return py


records = st.lists(
    st.tuples(
        st.integers(-(10**6), 10**6),
        lying.keys,
        lying.keys,
        st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=20)), max_size=2),
    ),
    min_size=1,
    max_size=40,
)


@given(records, lying.codecs, st.booleans())
@PROFILE
def test_what_a_producer_writes_passes(recs: list, codec: int, gaps: bool) -> None:
    b = BatchBuilder(compression=codec)
    for i, (tsd, k, v, hs) in enumerate(recs):
        b.append(lying.TS0 + tsd, k, v, hs, offset_delta=(3 * i if gaps else None))
    data = b.build()
    result = _both(data, sequential=not gaps)
    assert result.ok, problem_text(result, len(recs))
    stamps = [lying.TS0 + tsd for tsd, *_ in recs]
    assert result.max_timestamp == max(stamps)
    assert result.min_timestamp == min(stamps)
    assert result.keyless == sum(k is None for _, k, _, _ in recs)
    if gaps and len(recs) > 1:  # a producer's batch has offsets 0, 1, ...: gaps are refused on append
        assert _both(data, sequential=True).problem == check.P_OFFSET_DELTA


@pytest.mark.parametrize("lie_kind", lying.KINDS)
@given(st.data())
@PER_KIND
def test_every_lie_is_found_alike(lie_kind: str, drawn: st.DataObject) -> None:
    kind, data = drawn.draw(lying.lies(kinds=(lie_kind,)))
    for sequential in (True, False):
        result = _both(data, sequential=sequential)
        assert not result.ok, kind
        assert problem_text(result, 1)


@given(st.data())
@PROFILE
def test_damaged_records_give_the_same_answer(data: st.DataObject) -> None:
    """Random damage (not necessarily a lie: some still parse) gets one answer from both passes."""
    b = BatchBuilder()
    for tsd, k, v, hs in data.draw(records):
        b.append(lying.TS0 + tsd, k, v, [(n, x) for n, x in hs])
    buf = bytearray(b.build())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(61, len(buf) - 1))
        buf[at] = data.draw(st.sampled_from([0x00, 0x01, 0x03, 0x7F, 0x80, 0xFF, buf[at] ^ 0x80, buf[at] ^ 0x02]))
    cut = data.draw(st.sampled_from([0, 0, 1, 7]))
    h = next(iter(odr.iter_batch_headers(bytes(buf))))
    count = h.record_count + data.draw(st.sampled_from([0, 0, -1, 1, 1000]))
    stop = len(buf) - cut
    for sequential in (True, False):
        args = (bytes(buf), 61, stop, count, h.base_timestamp, h.last_offset - h.base_offset)
        py = check_records_python(*args, sequential=sequential)
        if speedups.compiled is not None:
            assert RecordsCheck._make(speedups.compiled.check_records(*args, sequential)) == py


def _records(*recs: lying.Rec, **kw: object) -> bytes:
    return lying.batch(list(recs), **kw)  # type: ignore[arg-type]


R = lying.Rec


NAMED = {
    name: case
    for name, case in zip(
        ("more_declared", "fewer_declared", "trailing", "length_past_end", "length_too_long", "length_too_short",
         "repeated_offset", "key_length", "value_length", "header_count", "header_count_large", "header_key_length",
         "header_value_length", "varint_too_long", "timestamp_overflow"),
        [
        (_records(R(0, b"k", b"v"), count=2), check.P_EOF, 1, 0, "premature EOF reached: the batch declares 2"),
        (_records(R(0, b"k", b"v"), R(1, b"k", b"v"), count=1), check.P_TRAILING, 1, 9,
         "records still remaining in file: 9 bytes after the last of 1 records"),
        (_records(R(0, b"k", b"v"), tail=b"\x00\x00"), check.P_TRAILING, 1, 2, "2 bytes after the last"),
        (_records(R(0, b"k", b"v", length_delta=1)), check.P_RECORD_SIZE, 0, 9,
         "expected 9 bytes in record payload, but instead the buffer has only 8 remaining bytes"),
        (_records(R(0, b"k", b"v", length_delta=1), R(0, b"k", b"v")), check.P_SIZE_MISMATCH, 0, 9,
         "expected to read 9 bytes in record payload, but instead read 8"),
        (_records(R(0, b"k", b"v", length_delta=-1)), check.P_STRUCTURE, 0, 0, "runs past the end of the record"),
        (_records(R(0, b"k", b"v"), R(0, b"k", b"v", od=0)), check.P_OFFSET_DELTA, 1, 0,
         "Invalid offset delta 0 of record 1 of 2, after 1"),
        (_records(R(0, b"k", b"v", key_length=-2)), check.P_KEY_LENGTH, 0, -2, "key length -2"),
        (_records(R(0, b"k", b"v", value_length=-7)), check.P_VALUE_LENGTH, 0, -7, "value length -7"),
        (_records(R(0, b"k", b"v", header_count=-1)), check.P_HEADER_COUNT, 0, -1,
         "Found invalid number of record headers -1"),
        (_records(R(0, b"k", b"v", header_count=3)), check.P_HEADER_COUNT_LARGE, 0, 3,
         "3 is larger than the remaining size of the buffer"),
        (_records(R(0, b"k", b"v", headers=[(b"h", b"x")], header_key_length=-4)), check.P_HEADER_KEY_LENGTH, 0, -4,
         "Invalid negative header key size -4"),
        (_records(R(0, b"k", b"v", headers=[(b"h", b"x")], header_value_length=-2)), check.P_HEADER_VALUE_LENGTH, 0,
         -2, "header value length -2"),
        (_records(R(0, b"k", b"v", raw_tsd=b"\xff" * 10 + b"\x01")), check.P_VARINT, 0, 0, "longer than its type"),
        (_records(R(lying.INT64_MAX - lying.TS0 + 1, b"k", b"v")), check.P_TIMESTAMP, 0, lying.INT64_MAX - lying.TS0 + 1,
         "beyond the int64 range"),
        ],
        strict=True,
    )
}


@pytest.mark.parametrize("name", NAMED)
def test_each_lie_is_named(name: str) -> None:
    data, problem, index, value, text = NAMED[name]
    result = _both(data)
    assert (result.problem, result.record, result.value) == (problem, index, value)
    assert text in problem_text(result, _span(data)[3].record_count)


def test_negative_lengths_other_than_minus_one_are_refused_where_kafka_reads_null() -> None:
    """Kafka's reader takes a key length of -2 for a null key; librdkafka's consumer fails on it
    and stops at the batch. Refused here: such a record cannot come from a working producer."""
    data = _records(R(0, b"k", b"v"), R(1, None, b"v", key_length=-2))
    assert _both(data).problem == check.P_KEY_LENGTH
    assert _both(_records(R(0, None, b"v"))).keyless == 1  # -1 is a null key


def test_five_byte_varints_keep_kafkas_32_bits() -> None:
    """Bits beyond 32 in a varint's fifth byte are dropped (Kafka's ByteUtils.readVarint)."""
    # offset delta 1 written as 5 bytes with high bits set in the last one
    rec = R(0, b"k", b"v")
    good = lying.encode(rec, 1)
    body = good[1:]
    odd = body[:2] + b"\x82\x80\x80\x80\x70" + body[3:]
    data = lying.batch([R(0, b"k", b"v")], count=2, tail=odr.encode_varint(len(odd)) + odd)
    assert _both(data).ok


# -- the decoders a consumer uses -----------------------------------------------------------------


def _stored(data: bytes, base_offset: int = 100) -> bytes:
    buf = bytearray(data)
    odr.patch_base_offset(buf, 0, base_offset)
    return bytes(buf)


@pytest.mark.parametrize("lie_kind", lying.KINDS)
@given(st.data())
@PER_KIND
def test_the_decoders_refuse_every_lie(lie_kind: str, drawn: st.DataObject) -> None:
    kind, data = drawn.draw(lying.lies(kinds=(lie_kind,)))
    stored = _stored(data)
    batch = next(iter(odr.read_batches(stored)))
    assert batch.compiled_records(tuple, "t", 0, 0) is None, kind  # the compiled decoder hands it over
    with pytest.raises(odr.RecordsError):
        batch.record_columns()
    with pytest.raises(odr.RecordsError):
        _ = next(iter(odr.read_batches(stored))).records


@given(st.data())
@PROFILE
def test_long_batches_of_one_shape_agree(data: st.DataObject) -> None:
    """The compiled pass reads records of the usual shape in a loop of its own (varints of up to three
    bytes, no headers) and hands anything else to the general parse: both agree with Python on long
    batches with a record of another shape or damage anywhere."""
    n = data.draw(st.sampled_from([300, 9000, 20_000]))
    b = BatchBuilder()
    odd = data.draw(st.integers(0, n - 1))
    for i in range(n):
        headers = [("h", b"x")] if i == odd else []
        b.append(lying.TS0 + (i // 7) * data.draw(st.sampled_from([1, 1000])) if i == 0 else lying.TS0 + i // 7,
                 None if i % 3 else b"key", b"v" * (i % 150), headers)
    buf = bytearray(b.build())
    if data.draw(st.booleans()):
        at = data.draw(st.integers(61, len(buf) - 1))
        buf[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, buf[at] ^ 0x02]))
    h = next(iter(odr.iter_batch_headers(bytes(buf))))
    for sequential in (True, False):
        args = (bytes(buf), 61, len(buf), h.record_count, h.base_timestamp, h.last_offset - h.base_offset)
        py = check_records_python(*args, sequential=sequential)
        if speedups.compiled is not None:
            assert RecordsCheck._make(speedups.compiled.check_records(*args, sequential)) == py
