"""Zig-zag varints: round trips, boundaries, tables, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import decode_varint as kp_decode
from kafka.record.util import encode_varint as kp_encode

import odradek.records as odr
from odradek.records import _varint as v

from .records_helpers import PROFILE

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
BOUNDARIES = sorted(
    {
        s * ((1 << k) + d)
        for k in range(0, 64)
        for d in (-1, 0, 1)
        for s in (1, -1)
        if -(2**63) <= s * ((1 << k) + d) < 2**63
    }
    | {0, *INT32, *INT64}
)


def kafka_bytes(value: int) -> bytes:
    out = bytearray()
    kp_encode(value, out.append)
    return bytes(out)


@pytest.mark.parametrize("value", BOUNDARIES)
def test_varlong_boundaries(value: int) -> None:
    encoded = v.encode_varlong(value)
    assert encoded == kafka_bytes(value)
    assert v.decode_varlong(encoded, 0) == (value, len(encoded))
    assert v.decode_varlong(b"\x00" + encoded + b"\x00", 1) == (value, len(encoded) + 1)
    assert v.size_of_varint(value) == len(encoded)
    if INT32[0] <= value <= INT32[1]:
        assert v.encode_varint(value) == encoded
        assert v.decode_varint(encoded, 0) == (value, len(encoded))
        assert len(encoded) <= 5
    else:
        with pytest.raises(ValueError):
            v.encode_varint(value)


def test_out_of_range_encodes() -> None:
    with pytest.raises(ValueError):
        v.encode_varlong(2**63)
    with pytest.raises(ValueError):
        v.encode_varlong(-(2**63) - 1)


@given(st.integers(*INT64))
@PROFILE
def test_varlong_round_trip(value: int) -> None:
    encoded = odr.encode_varlong(value)
    assert encoded == kafka_bytes(value)
    assert odr.decode_varlong(encoded, 0) == (value, len(encoded))
    assert kp_decode(encoded, 0) == (value, len(encoded))


@given(st.integers(*INT32))
@PROFILE
def test_varint_round_trip(value: int) -> None:
    encoded = odr.encode_varint(value)
    assert odr.decode_varint(memoryview(encoded), 0) == (value, len(encoded))


def test_tables_agree_with_the_general_code() -> None:
    for u in range(256):
        if u < 0x80:
            assert v.ZIGZAG1[u] == v.decode_varint(bytes([u]), 0)[0]
        else:
            assert v.ZIGZAG1[u] is None
    for word in range(0, 65536, 7):
        b0, b1 = word >> 8, word & 0xFF
        if b0 >= 0x80 and b1 < 0x80:
            assert v.ZIGZAG2[word] == v.decode_varint(bytes([b0, b1]), 0)[0]
        else:
            assert v.ZIGZAG2[word] is None
    for n in (0, 1, 63, 64, 8191):
        assert v.ENCODED_NONNEG[n] == kafka_bytes(n)
    for n in (-8192, -65, -64, -1, 0, 63, 64, 8191):
        assert v.ENCODED_SIGNED[n + v.SIGNED_BIAS] == kafka_bytes(n)


def test_too_long_and_truncated() -> None:
    with pytest.raises(odr.CorruptRecordError):
        v.decode_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(odr.CorruptRecordError):
        v.decode_varlong(b"\x80" * 10 + b"\x01", 0)
    for data in (b"", b"\x80", b"\xff\xff", b"\x80" * 9):
        with pytest.raises(odr.TruncatedBatchError):
            v.decode_varlong(data, 0)
        with pytest.raises(odr.CorruptRecordError):
            v.decode_varint(data, 0)


def test_overlong_final_byte_is_truncated_like_kafka() -> None:
    # a 5-byte varint whose last byte carries more than the 4 bits int32 has room for
    value, pos = v.decode_varint(b"\xff\xff\xff\xff\x7f", 0)
    assert pos == 5
    assert INT32[0] <= value <= INT32[1]
    assert value == v.decode_varint(b"\xff\xff\xff\xff\x0f", 0)[0]
