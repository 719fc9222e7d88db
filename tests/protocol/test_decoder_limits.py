"""Kafka 4.4's decoding limits: an array declaring more than 1,000,000 elements, or a struct more
than 10,000 tagged fields, is refused (as is a count the bytes left cannot hold), with Kafka's
messages, whatever the bytes that follow; up to the limits such messages decode."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import DecodeError
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest

MAX_ARRAY_LENGTH = 1_000_000  # Kafka's MessageUtil.MAX_ARRAY_LENGTH
MAX_TAGGED_FIELD_COUNT = 10_000  # Kafka's MessageUtil.MAX_TAGGED_FIELD_COUNT


def write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)


def _groups_v0(count: int, present: int) -> bytes:
    """A DescribeGroups v0 body declaring ``count`` group ids, ``present`` empty ones following."""
    return struct.pack(">i", count) + b"\x00\x00" * present


def _tagged_v3(count: int, present: int) -> bytes:
    """An ApiVersions v3 body (two empty compact strings) whose tagged section declares ``count``
    fields, ``present`` of them following (unknown tags, empty values)."""
    out = bytearray(b"\x01\x01")
    write_uvarint(out, count)
    for tag in range(present):
        write_uvarint(out, 100 + tag)
        out.append(0)
    return bytes(out)


def test_an_array_of_more_than_a_million_elements_is_refused() -> None:
    assert len(DescribeGroupsRequest.decode(_groups_v0(MAX_ARRAY_LENGTH, MAX_ARRAY_LENGTH), 0).groups) == MAX_ARRAY_LENGTH
    with pytest.raises(DecodeError, match="which exceeds the maximum allowed size of 1000000"):
        DescribeGroupsRequest.decode(_groups_v0(MAX_ARRAY_LENGTH + 1, MAX_ARRAY_LENGTH + 1), 0)


def test_an_array_of_integers_longer_than_the_data_is_refused() -> None:
    # OffsetFetch v1: group, one topic whose partition list ([]int32) declares more than follows
    body = struct.pack(">h", 1) + b"g" + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 5) + struct.pack(">4i", 0, 1, 2, 3)
    with pytest.raises(DecodeError):
        OffsetFetchRequest.decode(body, 1)


def test_more_than_ten_thousand_tagged_fields_are_refused() -> None:
    msg = ApiVersionsRequest.decode(_tagged_v3(MAX_TAGGED_FIELD_COUNT, MAX_TAGGED_FIELD_COUNT), 3)
    assert len(msg.unknown_tagged_fields) == MAX_TAGGED_FIELD_COUNT
    with pytest.raises(DecodeError, match="which exceeds the maximum allowed count of 10000"):
        ApiVersionsRequest.decode(_tagged_v3(MAX_TAGGED_FIELD_COUNT + 1, MAX_TAGGED_FIELD_COUNT + 1), 3)
    with pytest.raises(DecodeError, match="but there are only 2 bytes remaining"):
        ApiVersionsRequest.decode(_tagged_v3(5000, 1), 3)


@settings(max_examples=60, deadline=None)
@given(count=st.integers(0, 3_000_000), present=st.integers(0, 64), extra=st.binary(max_size=8))
def test_array_counts_either_decode_or_are_refused(count: int, present: int, extra: bytes) -> None:
    """Whatever the declared count, the decoder answers with a message that holds exactly the
    declared elements, or refuses with DecodeError (never allocates for a count the data cannot
    hold, never another exception)."""
    data = _groups_v0(count, present) + extra
    try:
        msg, end = DescribeGroupsRequest.decode_from(data, 0, 0)
    except DecodeError:
        assert count > MAX_ARRAY_LENGTH or 2 * count > len(data) - 4 or extra
        return
    assert count <= min(MAX_ARRAY_LENGTH, present + len(extra) // 2)
    assert len(msg.groups) == count and end <= len(data)


@settings(max_examples=60, deadline=None)
@given(count=st.integers(0, 50_000), present=st.integers(0, 40), tail=st.binary(max_size=12))
def test_tagged_counts_either_decode_or_are_refused(count: int, present: int, tail: bytes) -> None:
    data = _tagged_v3(count, present) + tail
    try:
        msg, _end = ApiVersionsRequest.decode_from(data, 0, 3)
    except DecodeError:
        return
    assert count <= MAX_TAGGED_FIELD_COUNT
    assert len(msg.unknown_tagged_fields or []) == count
