"""Framing and connection state of the sans-I/O server and client."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.errors import ErrorCode
from odradek.protocol import (
    NEED_DATA,
    BadRequest,
    ClientConnection,
    ConnectionClosed,
    ConnectionState,
    CorrelationIdMismatch,
    EncodeError,
    FrameTooLarge,
    InvalidFrame,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    RequestHeader,
    RequestReceived,
    ResponseReceived,
    ServerConnection,
    UnsupportedVersion,
)
from odradek.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from odradek.protocol.messages.metadata import MetadataRequest, MetadataResponse


def _drain(conn: ServerConnection) -> list[object]:
    events = []
    while True:
        ev = conn.next_event()
        if ev is NEED_DATA:
            return events
        events.append(ev)
        if isinstance(ev, ConnectionClosed):
            return events


@given(st.lists(st.integers(1, 40), min_size=1, max_size=30))
def test_pipelined_requests_split_anywhere_arrive_in_order(chunks: list[int]) -> None:
    client = ClientConnection(client_id="t")
    wire = b"".join(client.send_request(MetadataRequest(topics=None), 9)[1] for _ in range(5))
    server = ServerConnection()
    events: list[object] = []
    pos = 0
    for n in chunks * (len(wire) // sum(chunks) + 1):
        server.receive_data(wire[pos : pos + n])
        pos += n
        events += _drain(server)
        if pos >= len(wire):
            break
    assert [e.header.correlation_id for e in events if isinstance(e, RequestReceived)] == [0, 1, 2, 3, 4]
    assert all(isinstance(e, RequestReceived) for e in events)


def test_responses_are_released_in_request_order_and_client_matches_them() -> None:
    client = ClientConnection(client_id="t")
    server = ServerConnection()
    for _ in range(3):
        server.receive_data(client.send_request(MetadataRequest(topics=None), 12)[1])
    reqs = [e for e in _drain(server) if isinstance(e, RequestReceived)]
    assert len(reqs) == 3 and server.in_flight == 3
    # answer out of order: nothing can go out until the first request is answered
    out = server.send_response(reqs[2].header, MetadataResponse(cluster_id="c2"))
    assert out == b""
    out = server.send_response(reqs[1].header, MetadataResponse(cluster_id="c1"))
    assert out == b""
    out = server.send_response(reqs[0].header, MetadataResponse(cluster_id="c0"))
    assert server.in_flight == 0
    client.receive_data(out)
    got = []
    while (ev := client.next_event()) is not NEED_DATA:
        assert isinstance(ev, ResponseReceived)
        got.append((ev.correlation_id, ev.response.cluster_id))
    assert got == [(0, "c0"), (1, "c1"), (2, "c2")]
    assert client.in_flight == 0


def test_requests_without_response_do_not_block_later_ones() -> None:
    client = ClientConnection()
    server = ServerConnection()
    server.receive_data(client.send_request(MetadataRequest(topics=None), 1, expect_response=False)[1])
    server.receive_data(client.send_request(MetadataRequest(topics=None), 1)[1])
    a, b = _drain(server)
    assert isinstance(a, RequestReceived) and isinstance(b, RequestReceived)
    assert server.send_response(b.header, MetadataResponse()) == b""
    out = server.no_response(a.header)
    client.receive_data(out)
    ev = client.next_event()
    assert isinstance(ev, ResponseReceived) and ev.correlation_id == 1


def test_oversized_and_negative_frames_are_fatal() -> None:
    server = ServerConnection(max_frame_size=1000)
    server.receive_data(struct.pack(">i", 1001))
    with pytest.raises(FrameTooLarge):
        server.next_event()
    server = ServerConnection()
    server.receive_data(struct.pack(">i", -3))
    with pytest.raises(InvalidFrame):
        server.next_event()


def test_bad_request_is_reported_and_the_connection_stays_in_sync() -> None:
    client = ClientConnection()
    server = ServerConnection()
    garbage = b"\x00\x03\x00\x05\x00"  # too short to be a request
    server.receive_data(struct.pack(">i", len(garbage)) + garbage)
    server.receive_data(client.send_request(ApiVersionsRequest(), 0)[1])
    bad, good = _drain(server)
    assert isinstance(bad, BadRequest) and bad.header is None
    assert isinstance(good, RequestReceived)


def test_unsupported_api_versions_request_can_still_be_answered_in_v0() -> None:
    server = ServerConnection()
    body = struct.pack(">hhi", 18, 42, 77) + b"\x00\x01c\x00"
    server.receive_data(struct.pack(">i", len(body)) + body)
    (ev,) = _drain(server)
    assert isinstance(ev, BadRequest) and isinstance(ev.error, UnsupportedVersion)
    assert ev.header is not None
    ev.header.api_version = 0
    out = server.send_response(ev.header, ApiVersionsResponse(error_code=35, api_keys=[]))
    # size, correlation id 77, error 35, empty array
    assert out == struct.pack(">iihi", 10, 77, 35, 0)


def test_api_versions_response_header_has_no_tagged_fields() -> None:
    client = ClientConnection()
    server = ServerConnection()
    server.receive_data(client.send_request(ApiVersionsRequest(client_software_name="x"), 3)[1])
    (ev,) = _drain(server)
    assert isinstance(ev, RequestReceived)
    out = server.send_response(ev.header, ApiVersionsResponse(error_code=0))
    # size(4) correlation(4) then directly error code 0x0000 (no header tag byte)
    assert out[4:8] == b"\x00\x00\x00\x00" and out[8:10] == b"\x00\x00"
    client.receive_data(out)
    resp = client.next_event()
    assert isinstance(resp, ResponseReceived) and resp.response.error_code == 0


def test_peer_close_is_an_event() -> None:
    server = ServerConnection()
    server.receive_data(b"\x00\x00")
    server.receive_data(b"")
    assert server.next_event() == ConnectionClosed(clean=False)


def test_client_rejects_a_response_with_the_wrong_correlation_id() -> None:
    client = ClientConnection()
    client.send_request(MetadataRequest(topics=None), 1)
    body = struct.pack(">i", 5) + MetadataResponse().encode(1)
    client.receive_data(struct.pack(">i", len(body)) + body)
    with pytest.raises(CorrelationIdMismatch):
        client.next_event()


# the ERROR state and whose fault an error is (h11's rules)


def test_a_bad_frame_is_the_peers_fault_and_leaves_the_server_in_error() -> None:
    server = ServerConnection(max_frame_size=1000)
    server.receive_data(struct.pack(">i", 1001))
    with pytest.raises(RemoteProtocolError):
        server.next_event()
    assert server.state is ConnectionState.ERROR
    for call in (server.next_event, lambda: server.receive_data(b"x"), server.buffer, lambda: server.filled(0)):
        with pytest.raises(LocalProtocolError, match="ERROR state"):
            call()


def test_answering_a_request_that_is_not_waiting_is_our_fault() -> None:
    client = ClientConnection()
    server = ServerConnection()
    server.receive_data(client.send_request(MetadataRequest(topics=None), 1)[1])
    (ev,) = _drain(server)
    assert isinstance(ev, RequestReceived)
    other = RequestHeader(api_key=3, api_version=1, correlation_id=99, client_id=None)
    with pytest.raises(LocalProtocolError):
        server.send_response(other, MetadataResponse())
    assert server.state is ConnectionState.ERROR
    with pytest.raises(LocalProtocolError, match="ERROR state"):
        server.send_response(ev.header, MetadataResponse())


def test_a_response_the_version_cannot_carry_is_an_encode_error_and_ends_the_connection() -> None:
    client = ClientConnection()
    server = ServerConnection()
    server.receive_data(client.send_request(MetadataRequest(topics=None), 1)[1])
    (ev,) = _drain(server)
    # cluster_authorized_operations is in v8-10 only and not ignorable
    with pytest.raises(EncodeError) as info:
        server.send_response(ev.header, MetadataResponse(cluster_authorized_operations=5))
    assert isinstance(info.value, LocalProtocolError)
    assert server.state is ConnectionState.ERROR


def test_a_request_that_does_not_decode_is_an_event_not_an_error() -> None:
    server = ServerConnection()
    garbage = b"\x00\x03\x00\x05\x00"
    server.receive_data(struct.pack(">i", len(garbage)) + garbage)
    (bad,) = _drain(server)
    assert isinstance(bad, BadRequest) and isinstance(bad.error, RemoteProtocolError)
    assert server.state is ConnectionState.OPEN


def test_the_client_refuses_to_go_on_after_a_response_to_no_request() -> None:
    client = ClientConnection()
    client.send_request(MetadataRequest(topics=None), 1)
    body = struct.pack(">i", 5) + MetadataResponse().encode(1)
    client.receive_data(struct.pack(">i", len(body)) + body)
    with pytest.raises(CorrelationIdMismatch) as info:
        client.next_event()
    assert isinstance(info.value, RemoteProtocolError)
    assert client.state is ConnectionState.ERROR
    with pytest.raises(LocalProtocolError, match="ERROR state"):
        client.send_request(MetadataRequest(topics=None), 1)


def test_a_request_the_client_cannot_encode_is_its_own_fault_and_changes_nothing() -> None:
    client = ClientConnection()
    with pytest.raises(EncodeError) as info:
        client.send_request(MetadataRequest(topics=None), 99)
    assert isinstance(info.value, LocalProtocolError) and info.value.code == ErrorCode.UNSUPPORTED_VERSION
    # refused before anything changed: the connection goes on, with the next correlation id
    assert client.state is ConnectionState.OPEN and client.in_flight == 0
    assert client.send_request(MetadataRequest(topics=None), 1)[0] == 0


def test_protocol_error_itself_cannot_be_raised() -> None:
    with pytest.raises(TypeError):
        ProtocolError("whose fault?")
    assert LocalProtocolError("x").code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert RemoteProtocolError("x").code == ErrorCode.INVALID_REQUEST
    assert not issubclass(LocalProtocolError, RemoteProtocolError)
    assert not issubclass(RemoteProtocolError, LocalProtocolError)


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("bytes"), st.binary(max_size=30)),
        st.tuples(st.just("request"), st.integers(1, 12)),
        st.tuples(st.just("event"), st.none()),
        st.tuples(st.just("answer"), st.integers(0, 6)),
        st.tuples(st.just("eof"), st.none()),
    ),
    max_size=25,
)


@given(_OPS)
def test_any_sequence_of_calls_leaves_the_server_open_or_in_error_for_good(ops: list[tuple[str, object]]) -> None:
    client = ClientConnection()
    server = ServerConnection(max_frame_size=4096)
    received: list[RequestHeader] = []
    for kind, arg in ops:
        was = server.state
        try:
            if kind == "bytes":
                server.receive_data(arg or b"\x00")  # type: ignore[arg-type]
            elif kind == "request":
                server.receive_data(client.send_request(MetadataRequest(topics=None), arg)[1])  # type: ignore[arg-type]
            elif kind == "event":
                ev = server.next_event()
                if isinstance(ev, RequestReceived):
                    received.append(ev.header)
            elif kind == "answer":
                header = received[arg] if arg < len(received) else RequestHeader(api_key=3, api_version=1, correlation_id=1000)  # type: ignore[operator,index]
                server.send_response(header, MetadataResponse())
            else:
                server.receive_data(b"")
        except ProtocolError as exc:
            assert server.state is ConnectionState.ERROR
            if was is ConnectionState.ERROR:
                assert isinstance(exc, LocalProtocolError) and "ERROR state" in str(exc)
            continue
        assert was is ConnectionState.OPEN and server.state is ConnectionState.OPEN
