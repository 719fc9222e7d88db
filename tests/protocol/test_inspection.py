"""Reading a request's topic count before decoding it (odradek.protocol.inspection), at every
version of every request the generated table covers, and on malformed bytes."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import (
    ApiKey,
    RequestHeader,
    RequestTooLarge,
    TopicLimit,
    decode_request,
    encode_request,
    request_class,
    request_topic_count,
)
from odradek.protocol._schema import BYTES, STRING, Array, Data, Field, Struct
from odradek.protocol.messages._inspection import TOPIC_ARRAYS

from ._strategies import message_of

CASES = [
    (api_key, version)
    for api_key, groups in sorted(TOPIC_ARRAYS.items())
    for first, last, _flexible, _types in groups
    for version in range(first, last + 1)
]


def _in(version: int, versions: tuple[int, int] | None) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def _topic_field(cls: type[Data], version: int) -> Field:
    """The request's first top-level array at ``version``: its topic array."""
    for f in cls._fields_:
        if _in(version, f.versions) and not (f.tag is not None and _in(version, f.tagged)) and isinstance(f.type, Array):
            return f
    raise AssertionError(f"{cls.NAME} v{version} has no array")


def _request(api_key: int, version: int, count: int | None) -> Any:
    """A request naming ``count`` topics (None: a null array), its strings before the array set."""
    cls = request_class(api_key)
    msg = cls()
    topics = _topic_field(cls, version)
    for f in cls._fields_:
        if f is topics:
            break
        if _in(version, f.versions) and f.type is STRING:
            setattr(msg, f.attr, "some-id-" + "x" * 130)  # two-byte compact lengths too
        elif _in(version, f.versions) and f.type is BYTES:
            setattr(msg, f.attr, b"b" * 5)
    element = topics.type.element  # type: ignore[union-attr]
    if count is None:
        items = None
    elif isinstance(element, type) and issubclass(element, Struct):
        items = [element() for _ in range(count)]
    else:
        items = [f"t{i}" for i in range(count)]
    setattr(msg, topics.attr, items)
    return msg


def _encoded(message: Any, version: int, client_id: str | None = "a-client", tags: Any = None) -> bytes:
    header = RequestHeader(
        api_key=message.API_KEY, api_version=version, correlation_id=7, client_id=client_id,
        unknown_tagged_fields=tags,
    )
    return encode_request(header, message)


def test_the_table_covers_the_requests_the_broker_limits() -> None:
    for api in (ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.DELETE_RECORDS, ApiKey.LIST_OFFSETS):
        lo, hi = request_class(api).VALID_VERSIONS
        assert {v for a, v in CASES if a == api} == set(range(lo, hi + 1)), api.name


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{ApiKey(a).name}-v{v}" for a, v in CASES])
def test_topic_count_is_read_from_the_raw_frame(api_key: int, version: int) -> None:
    for count in (0, 1, 3, 200):
        msg = _request(api_key, version, count)
        assert request_topic_count(_encoded(msg, version)) == count
        assert request_topic_count(_encoded(msg, version, client_id=None)) == count
        if request_class(api_key).is_flexible(version):  # a request header with tagged fields
            assert request_topic_count(_encoded(msg, version, tags=[(3, b"abc"), (70, b"")])) == count
        assert len(getattr(decode_request(_encoded(msg, version))[1], _topic_field(type(msg), version).attr)) == count


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{ApiKey(a).name}-v{v}" for a, v in CASES])
def test_a_null_topic_array_has_no_count(api_key: int, version: int) -> None:
    cls = request_class(api_key)
    if not _in(version, _topic_field(cls, version).nullable):
        return
    assert request_topic_count(_encoded(_request(api_key, version, None), version)) is None


@settings(max_examples=3)
@given(st.sampled_from(CASES).flatmap(lambda case: st.tuples(st.just(case[1]), message_of(request_class(case[0]), case[1]))))
def test_any_request_counts_what_its_topic_array_holds(case: tuple[int, Any]) -> None:
    version, msg = case
    topics = getattr(msg, _topic_field(type(msg), version).attr)
    assert request_topic_count(_encoded(msg, version)) == (None if topics is None else len(topics))


def test_requests_outside_the_table_and_garbage_have_no_count() -> None:
    from odradek.protocol.messages.api_versions import ApiVersionsRequest

    assert request_topic_count(_encoded(ApiVersionsRequest(), 3)) is None
    assert request_topic_count(b"\x00\x03") is None
    assert request_topic_count(b"\xff\xff\x00\x01" + b"\x00" * 20) is None  # unknown API key
    assert request_topic_count(b"\x00\x03\x00\x63" + b"\x00" * 20) is None  # version 99


SAMPLES = [_encoded(_request(a, v, 3), v) for a, v in CASES]


@settings(max_examples=300)
@given(st.sampled_from(SAMPLES), st.data())
def test_malformed_frames_give_a_count_or_none_and_never_raise(sample: bytes, data: st.DataObject) -> None:
    buf = bytearray(sample)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    for frame in (bytes(buf), bytes(buf[:cut])):
        n = request_topic_count(frame)
        assert n is None or 0 <= n < 2**31
        with contextlib.suppress(RequestTooLarge):
            TopicLimit(2)(frame)


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_random_bytes_give_a_count_or_none(data: bytes) -> None:
    n = request_topic_count(data)
    assert n is None or n >= 0
    with contextlib.suppress(RequestTooLarge):
        TopicLimit(0)(data)


def test_the_limit_refuses_only_the_limited_apis_above_it() -> None:
    metadata = _encoded(_request(ApiKey.METADATA, 12, 11), 12)
    TopicLimit(11)(metadata)
    with pytest.raises(RequestTooLarge, match="METADATA v12 request names 11 topics") as info:
        TopicLimit(10)(metadata)
    assert info.value.code == 42  # INVALID_REQUEST
    produce = _encoded(_request(ApiKey.PRODUCE, 9, 11), 9)
    TopicLimit(10)(produce)  # Produce is not limited by default
    with pytest.raises(RequestTooLarge):
        TopicLimit(10, apis={ApiKey.PRODUCE})(produce)
