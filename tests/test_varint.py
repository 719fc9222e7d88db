"""Odradek's one varint loop (odradek._varint): the wire protocol's unsigned varints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek import _varint as v


@given(st.integers(0, 2**32 - 1))
def test_unsigned_varint_round_trip(value: int) -> None:
    out = bytearray(b"\x07")
    v.write_uvarint(out, value)
    assert len(out) - 1 == max(1, (value.bit_length() + 6) // 7)
    assert v.decode_uvarint(bytes(out) + b"\xff", 1) == (value, len(out))


@pytest.mark.parametrize("value", [-1, 2**32, 2**40])
def test_unsigned_varint_out_of_range_is_refused(value: int) -> None:
    with pytest.raises(ValueError):
        v.write_uvarint(bytearray(), value)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", IndexError),
        (b"\x80\x80", IndexError),
        (b"\x80\x80\x80\x80\x80\x01", v.VarintError),  # six bytes
        (b"\xff\xff\xff\xff\x1f", v.VarintError),  # 35 bits
    ],
)
def test_malformed_unsigned_varints(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        v.decode_uvarint(data, 0)
    assert v.decode_uvarint(b"\xff\xff\xff\xff\x0f", 0) == (2**32 - 1, 5)


def test_the_loop_keeps_bits_beyond_the_width_for_the_caller() -> None:
    # a 5-byte varint whose last byte carries more than 4 bits: zig-zag varints drop them (as
    # Kafka does), unsigned ones refuse them
    assert v.read_unsigned(b"\xff\xff\xff\xff\x7f", 0, 28) == (2**35 - 1, 5)
    big = bytearray()
    v.append_unsigned(big, 2**64 - 1)
    assert v.read_unsigned(bytes(big), 0, 63) == (2**64 - 1, 10)
