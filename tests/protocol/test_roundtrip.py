"""Every generated message round-trips at every valid version (hypothesis)."""

from __future__ import annotations

import importlib
import os
import pkgutil
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import odradek.protocol.messages as messages_pkg
from odradek.protocol import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from odradek.protocol._schema import Data, Message
from odradek.protocol.messages import API_MODULES, request_class, response_class

from ._strategies import message_of

EXAMPLES = 4 if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else 15


def _all_classes() -> list[type[Data]]:
    classes: list[type[Data]] = []
    for info in pkgutil.iter_modules(messages_pkg.__path__):
        if info.name.startswith("_"):  # the codecs and the inspection table
            continue
        module = importlib.import_module(f"odradek.protocol.messages.{info.name}")
        for name in getattr(module, "__all__", []):
            classes.append(getattr(module, name))
    return classes


CLASSES = _all_classes()
CASES = [
    pytest.param(cls, v, id=f"{cls.NAME}-v{v}")
    for cls in CLASSES
    for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)
]


def test_every_api_key_has_request_and_response_classes() -> None:
    assert len(API_MODULES) >= 80
    for key in API_MODULES:
        req, resp = request_class(key), response_class(key)
        assert req.API_KEY == key == resp.API_KEY
        assert req.TYPE == "request" and resp.TYPE == "response"
        assert req.VALID_VERSIONS[1] >= 0


def test_headers_and_coordinator_records_are_generated() -> None:
    from odradek.protocol.messages import coordinator

    for name in ("OffsetCommitKey", "OffsetCommitValue", "GroupMetadataKey", "GroupMetadataValue"):
        assert hasattr(coordinator, name)
    for name in ("TransactionLogKey", "TransactionLogValue"):
        assert hasattr(coordinator, name)


@pytest.mark.parametrize(("cls", "version"), CASES)
def test_body_roundtrip(cls: type[Data], version: int) -> None:
    @settings(max_examples=EXAMPLES)
    @given(message_of(cls, version))
    def check(msg: Any) -> None:
        data = msg.encode(version)
        back, end = cls.decode_from(data, 0, version)
        assert end == len(data)
        assert back == msg
        assert back.encode(version) == data

    check()


REQUEST_CASES = [
    pytest.param(request_class(k), v, id=f"{request_class(k).NAME}-v{v}")
    for k in API_MODULES
    for v in range(request_class(k).VALID_VERSIONS[0], request_class(k).VALID_VERSIONS[1] + 1)
]


@pytest.mark.parametrize(("cls", "version"), REQUEST_CASES)
def test_request_and_response_with_headers(cls: type[Message], version: int) -> None:
    resp_cls = response_class(cls.API_KEY)

    @settings(max_examples=max(1, EXAMPLES // 2))
    @given(
        message_of(cls, version),
        message_of(resp_cls, version) if resp_cls.VALID_VERSIONS[0] <= version <= resp_cls.VALID_VERSIONS[1] else st.none(),
        st.integers(0, 2**31 - 1),
        st.one_of(st.none(), st.text(max_size=10)),
    )
    def check(req: Any, resp: Any, correlation_id: int, client_id: str | None) -> None:
        header = RequestHeader(api_key=cls.API_KEY, api_version=version, correlation_id=correlation_id, client_id=client_id)
        if cls.API_KEY == 7 and version == 0:
            header.client_id = ""  # ControlledShutdown v0: header v0 has no client id (default "")
        data = encode_request(header, req)
        assert decode_request(data) == (header, req)
        if resp is not None:
            rdata = encode_response(header, resp)
            assert decode_response(header, rdata) == resp

    check()
