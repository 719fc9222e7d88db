"""Odradek's codec against kafka-python 3.x, an independent implementation generated from the same JSON.

For every request and response kafka-python implements, at every version both implement and
whose wire layout both schema copies agree on, the same message (drawn with hypothesis from
Odradek's schema) must

* encode to identical bytes in Odradek and in kafka-python, as a bare body and as a whole
  request/response with its header;
* decode, in each library, from the other's bytes to a value equal to the original.

kafka-python declares ``validVersions`` from its own (newer) JSON but accepts every version
from 0 (it patches the minimum to 0 to talk to old brokers), so the compared range is
``Odradek's validVersions`` ∩ ``0..kafka-python's maximum``, minus any version whose layouts
differ (:func:`compare_version`; none do today, see :data:`KNOWN_LAYOUT_DIFFERENCES`).
"""

from __future__ import annotations

import os
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from odradek.protocol._schema import Data, Message
from odradek.protocol.messages import data as odradek_data

from ._kp_bridge import (
    compare_version,
    from_kp,
    kp_classes,
    kp_data_classes,
    kp_decode,
    message_strategy,
    odradek_class,
    to_kp,
)

EXAMPLES = min(settings().max_examples, 3 if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else 5)

#: (kafka-python class name, version) -> reason, for shared versions whose layouts disagree.
#: Empty: with the renames in ``_kp_bridge.RENAMES`` every shared version agrees.  A change in
#: either JSON copy that breaks this shows up in ``test_layouts_agree_at_every_shared_version``.
KNOWN_LAYOUT_DIFFERENCES: dict[tuple[str, int], str] = {}


def _cases() -> tuple[list[Any], dict[tuple[str, int], list[str]], dict[str, tuple[int, int]]]:
    cases: list[Any] = []
    differences: dict[tuple[str, int], list[str]] = {}
    only_kp: dict[str, tuple[int, int]] = {}
    for (api_key, kind), kp_cls in kp_classes().items():
        odr_cls = odradek_class(api_key, kind)
        assert odr_cls is not None, f"kafka-python has {kp_cls.__name__}, Odradek has no API key {api_key}"
        lo, hi = odr_cls.VALID_VERSIONS
        top = min(hi, kp_cls.max_version)
        if kp_cls.max_version > hi:
            only_kp[kp_cls.__name__] = (hi + 1, kp_cls.max_version)
        for version in range(lo, top + 1):
            diff = compare_version(odr_cls, kp_cls, version)
            if diff:
                differences[(kp_cls.__name__, version)] = diff
            else:
                cases.append(
                    pytest.param(odr_cls, kp_cls, version, id=f"{api_key}-{kp_cls.__name__}-v{version}")
                )
    return cases, differences, only_kp


CASES, LAYOUT_DIFFERENCES, VERSIONS_ONLY_IN_KAFKA_PYTHON = _cases()


def _first_difference(a: bytes, b: bytes) -> str:
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first difference at byte {n} (lengths {len(a)} vs {len(b)}): {a[n : n + 16].hex()} vs {b[n : n + 16].hex()}"


def _assert_same_bytes(ours: bytes, theirs: bytes, what: str) -> None:
    assert ours == theirs, f"{what}: Odradek and kafka-python bytes differ, {_first_difference(ours, theirs)}"


def test_kafka_python_messages_are_all_discovered() -> None:
    classes = kp_classes()
    assert len(classes) >= 100  # 52 API keys, request and response each, in kafka-python 3.0.12
    for (api_key, kind), kp_cls in classes.items():
        assert kp_cls.is_request() == (kind == "request")
        odr_cls = odradek_class(api_key, kind)
        assert odr_cls is not None
        assert kind == odr_cls.TYPE


def test_layouts_agree_at_every_shared_version() -> None:
    assert {k: "; ".join(v) for k, v in LAYOUT_DIFFERENCES.items()} == KNOWN_LAYOUT_DIFFERENCES


def test_every_kafka_python_message_is_compared_and_coverage_is_large() -> None:
    compared = {p.values[1].__name__ for p in CASES}
    assert compared == {cls.__name__ for cls in kp_classes().values()}
    assert len(CASES) >= 450


@pytest.mark.parametrize(("odr_cls", "kp_cls", "version"), CASES)
def test_same_bytes_and_cross_decoding(odr_cls: type[Message], kp_cls: Any, version: int) -> None:
    flexible = odr_cls.is_flexible(version)
    kp_struct = kp_cls._struct
    is_request = odr_cls.TYPE == "request"

    @settings(max_examples=EXAMPLES)
    @given(
        msg=message_strategy(odr_cls, version),
        correlation_id=st.integers(-(2**31), 2**31 - 1),
        client_id=st.one_of(st.none(), st.just(""), st.text(max_size=8)),
    )
    def check(msg: Any, correlation_id: int, client_id: str | None) -> None:
        kmsg = to_kp(msg, kp_struct, version, flexible, kp_cls)

        # body only
        ours = msg.encode(version)
        theirs = kmsg.encode(version=version)
        _assert_same_bytes(ours, theirs, f"{odr_cls.NAME} v{version} body")
        assert odr_cls.decode(theirs, version) == msg
        assert from_kp(kp_decode(kp_cls, ours, version), odr_cls, kp_struct, version, flexible) == msg

        # whole request / response, header included (no size prefix)
        header = RequestHeader(
            api_key=odr_cls.API_KEY, api_version=version, correlation_id=correlation_id, client_id=client_id
        )
        if is_request:
            kmsg.with_header(correlation_id=correlation_id, client_id=client_id)
            ours = encode_request(header, msg)
        else:
            kmsg.with_header(correlation_id=correlation_id)
            ours = encode_response(header, msg)
        # the version was set when kmsg was built; passing it again to a response with a header
        # makes kafka-python set ``request_api_version`` on its ResponseHeader (AttributeError)
        theirs = kmsg.encode(header=True)
        _assert_same_bytes(ours, theirs, f"{odr_cls.NAME} v{version} with header")
        if is_request:
            assert decode_request(theirs) == (header, msg)
        else:
            assert decode_response(header, theirs) == msg
        kback = kp_decode(kp_cls, ours, version, header=True)
        if is_request:
            h = kback.header
            assert (h.request_api_key, h.request_api_version, h.correlation_id, h.client_id) == (
                odr_cls.API_KEY,
                version,
                correlation_id,
                client_id,
            )
        else:
            assert kback.header.correlation_id == correlation_id
        assert from_kp(kback, odr_cls, kp_struct, version, flexible) == msg

    check()


# --------------------------------------------------------------------------------------------
# versioned data structs outside requests and responses (the consumer group protocol's
# subscription and assignment), which both libraries also generate from the JSON


def _data_cases() -> list[Any]:
    cases = []
    for name, kp_cls in kp_data_classes().items():
        odr_cls = getattr(odradek_data, name, None)
        assert odr_cls is not None, f"kafka-python has data struct {name}, Odradek does not"
        for version in range(
            odr_cls.VALID_VERSIONS[0], min(odr_cls.VALID_VERSIONS[1], kp_cls.max_version) + 1
        ):
            assert compare_version(odr_cls, kp_cls, version) == []
            cases.append(pytest.param(odr_cls, kp_cls, version, id=f"{name}-v{version}"))
    return cases


DATA_CASES = _data_cases()


def test_data_structs_are_compared() -> None:
    assert {p.values[1].__name__ for p in DATA_CASES} == {
        "ConsumerProtocolAssignment",
        "ConsumerProtocolSubscription",
    }


@pytest.mark.parametrize(("odr_cls", "kp_cls", "version"), DATA_CASES)
def test_data_struct_same_bytes_and_cross_decoding(odr_cls: type[Data], kp_cls: Any, version: int) -> None:
    flexible = odr_cls.is_flexible(version)

    @settings(max_examples=EXAMPLES)
    @given(msg=message_strategy(odr_cls, version))
    def check(msg: Any) -> None:
        kmsg = to_kp(msg, kp_cls._struct, version, flexible, kp_cls)
        ours = msg.encode(version)
        _assert_same_bytes(ours, kmsg.encode(version=version, header=False), f"{odr_cls.NAME} v{version}")
        assert odr_cls.decode(kmsg.encode(version=version, header=False), version) == msg
        assert (
            from_kp(
                kp_cls.decode(ours, version=version, header=False), odr_cls, kp_cls._struct, version, flexible
            )
            == msg
        )
        # kafka-python's framing: an int16 version, then the body
        framed = struct.pack(">h", version) + ours
        assert kmsg.encode(version=version, header=True) == framed
        assert from_kp(kp_cls.decode(framed), odr_cls, kp_cls._struct, version, flexible) == msg

    check()
