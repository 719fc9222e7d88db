"""Confluent's framing, read in one place: every frame written is read back, and bytes that are
not a frame give FramingError (or None from ``schema_id``), never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.schemas.framing import (
    HEADER_BYTES,
    MAX_MESSAGE_INDEXES,
    FramingError,
    decode_message_indexes,
    encode_message_indexes,
    frame_header,
    read_header,
    schema_id,
)


@given(st.integers(0, 2**31 - 1), st.binary(max_size=20))
def test_a_frame_reads_back_its_schema_id(sid: int, payload: bytes) -> None:
    framed = frame_header(sid) + payload
    assert read_header(framed) == sid == schema_id(framed)
    assert framed[HEADER_BYTES:] == payload


@given(st.lists(st.integers(0, 2**40), min_size=1, max_size=MAX_MESSAGE_INDEXES), st.binary(max_size=8))
def test_message_indexes_read_back(indexes: list[int], payload: bytes) -> None:
    data = frame_header(7) + encode_message_indexes(indexes) + payload
    got, pos = decode_message_indexes(data)
    assert got == indexes and data[pos:] == payload


def test_the_first_message_is_one_zero_byte() -> None:
    assert encode_message_indexes([0]) == b"\x00"
    assert decode_message_indexes(b"\x00\x00\x00\x00\x01\x00") == ([0], 6)


@pytest.mark.parametrize("sid", [-1, 2**31])
def test_an_id_out_of_range_is_not_framed(sid: int) -> None:
    with pytest.raises(FramingError):
        frame_header(sid)


@given(st.binary(max_size=64))
def test_any_bytes_are_a_frame_or_a_framing_error(data: bytes) -> None:
    try:
        sid = read_header(data)
    except FramingError:
        assert schema_id(data) is None
        assert len(data) < HEADER_BYTES or data[0] != 0
        return
    assert sid == schema_id(data) == int.from_bytes(data[1:5], "big")
    try:
        indexes, pos = decode_message_indexes(data)
    except FramingError:
        return
    assert HEADER_BYTES < pos <= len(data)
    assert 1 <= len(indexes) <= MAX_MESSAGE_INDEXES and all(i >= 0 for i in indexes)


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (b"", "truncated"),
        (b"\x80", "truncated"),
        (b"\x01", "claims -1"),  # zigzag 1 = -1 indexes
        (b"\xca\x01", "claims 101"),  # zigzag 202 = 101 > MAX_MESSAGE_INDEXES
        (b"\x02\x01", "negative"),  # one index, -1
        (b"\x02" + b"\xff" * 11, "longer than 10 bytes"),
    ],
)
def test_a_lying_message_index_array_is_refused(tail: bytes, why: str) -> None:
    with pytest.raises(FramingError, match=why):
        decode_message_indexes(b"\x00\x00\x00\x00\x01" + tail)
