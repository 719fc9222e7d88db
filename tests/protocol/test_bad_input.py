"""Malformed bytes raise typed ProtocolErrors, quickly, and never anything else."""

from __future__ import annotations

import contextlib
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.errors import ErrorCode
from odradek.protocol import (
    DecodeError,
    EncodeError,
    LocalProtocolError,
    ProtocolError,
    RequestHeader,
    UnknownApiKey,
    UnsupportedVersion,
    decode_request,
    encode_request,
)
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.fetch import FetchRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.protocol.messages.produce import ProduceRequest


def _produce(version: int) -> bytes:
    msg = ProduceRequest(
        transactional_id="tx" if version >= 3 else None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="events",
                partition_data=[ProduceRequest.PartitionProduceData(index=3, records=b"\x00" * 70)],
            )
        ],
    )
    return encode_request(RequestHeader(api_key=0, api_version=version, correlation_id=9, client_id="c"), msg)


def _metadata(version: int) -> bytes:
    msg = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a")])
    return encode_request(RequestHeader(api_key=3, api_version=version, correlation_id=1, client_id="c"), msg)


SAMPLES = [_produce(v) for v in (0, 3, 8, 9, 11)] + [_metadata(v) for v in (0, 4, 9, 12)]


@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: d[:2].hex() + d[2:4].hex())
def test_every_truncation_is_a_decode_error(data: bytes) -> None:
    assert decode_request(data)  # the whole thing decodes
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            decode_request(data[:cut])


def test_unknown_api_key_keeps_the_header() -> None:
    data = struct.pack(">hhi", 999, 0, 42) + b"\x00\x00"
    with pytest.raises(UnknownApiKey) as info:
        decode_request(data)
    assert info.value.header is not None
    assert info.value.header.correlation_id == 42
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


def test_unsupported_version_keeps_the_header() -> None:
    data = struct.pack(">hhi", 18, 99, 7) + b"\x00\x01c\x00"
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(data)
    assert info.value.header is not None
    assert (info.value.header.api_key, info.value.header.api_version, info.value.header.correlation_id) == (18, 99, 7)


def test_encoding_a_version_outside_the_range_is_a_local_error() -> None:
    with pytest.raises(EncodeError) as info:
        ApiVersionsRequest().encode(ApiVersionsRequest.VALID_VERSIONS[1] + 1)
    assert isinstance(info.value, LocalProtocolError) and info.value.code == ErrorCode.UNSUPPORTED_VERSION


def test_non_ignorable_field_that_a_version_cannot_carry_fails() -> None:
    # FetchPartition.last_fetched_epoch exists from v12 and is not ignorable
    part = FetchRequest.FetchPartition(partition=0, fetch_offset=5, last_fetched_epoch=3)
    msg = FetchRequest(topics=[FetchRequest.FetchTopic(topic="t", partitions=[part])])
    assert msg.encode(12)
    with pytest.raises(EncodeError, match="last_fetched_epoch cannot be sent in this version") as info:
        msg.encode(11)
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    part.last_fetched_epoch = -1  # the default can be "sent" by leaving it out
    assert msg.encode(11)


def test_invalid_varint_is_a_decode_error() -> None:
    # ApiVersions v3 request: compact string length made of six continuation bytes
    data = struct.pack(">hhi", 18, 3, 1) + b"\x00\x01c" + b"\x00" + b"\xff" * 6 + b"\x01"
    with pytest.raises(DecodeError):
        decode_request(data)


def test_huge_array_count_is_refused_without_allocating() -> None:
    # Metadata v1: topics array claiming 2**31-1 elements in a 20-byte request
    data = struct.pack(">hhi", 3, 1, 1) + b"\xff\xff" + struct.pack(">i", 2**31 - 1) + b"\x00\x01a"
    start = time.perf_counter()
    with pytest.raises(DecodeError):
        decode_request(data)
    assert time.perf_counter() - start < 1.0  # refused up front, not by iterating


def test_negative_lengths_other_than_null_are_refused() -> None:
    good = _metadata(0)
    bad = bytearray(good)
    # topic name length at offset 8 (header) + 2 (client id len) + 1 ("c") + 4 (count) = 15
    struct.pack_into(">h", bad, 15, -5)
    with pytest.raises(DecodeError):
        decode_request(bytes(bad))


def test_null_for_a_non_nullable_string_is_refused() -> None:
    bad = bytearray(_metadata(0))
    struct.pack_into(">h", bad, 15, -1)  # topic name is not nullable
    with pytest.raises(DecodeError):
        decode_request(bytes(bad))


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_protocol_errors(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_request(data)


@settings(max_examples=300)
@given(st.sampled_from(SAMPLES), st.data())
def test_mutated_requests_only_raise_protocol_errors(sample: bytes, data: st.DataObject) -> None:
    buf = bytearray(sample)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        decode_request(bytes(buf))
