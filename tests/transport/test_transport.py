"""The transport layer on scripted in-memory brokers (``odradek.testing.MockCluster``): version
negotiation, the handshake, pipelining, timeouts and broken connections, coordinator lookup,
metadata, the inter-broker channel.  Every behaviour is checked on both faces: the asyncio one
(``AsyncCluster``) and the blocking one (``Cluster``), which run the same procedures."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages import ApiKey
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.fetch import FetchRequest
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from odradek.protocol.messages.metadata import MetadataRequest, MetadataResponse
from odradek.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from odradek.security import PlainClient
from odradek.testing import DISCONNECT, NO_ANSWER, Delayed, MockCluster
from odradek.transport import FRAMES, AsyncCluster, Channel, Cluster
from odradek.transport.coordinator import TRANSACTION
from odradek.transport.session import CLIENT_MAX_VERSIONS

FACES = ["async", "blocking"]


@pytest.fixture
def mock() -> Iterator[MockCluster]:
    with MockCluster(brokers=3) as cluster:
        yield cluster


class Face:
    """One API over both faces: every call runs to its end (the async face on a fresh loop)."""

    def __init__(self, kind: str, bootstrap: str, **kwargs: Any) -> None:
        self.kind = kind
        if kind == "async":
            self.loop = asyncio.new_event_loop()
            self.cluster: Any = AsyncCluster(bootstrap, client_id="transport-test", **kwargs)
        else:
            timeout = kwargs.pop("request_timeout_ms", 5000) / 1000
            self.cluster = Cluster(bootstrap, client_id="transport-test", timeout=timeout, **kwargs)

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.cluster, name)(*args, **kwargs)
        return self.loop.run_until_complete(result) if self.kind == "async" else result

    def conn(self, conn: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(conn, name)(*args, **kwargs)
        return self.loop.run_until_complete(result) if self.kind == "async" else result

    def close(self) -> None:
        self("close")
        if self.kind == "async":
            self.loop.close()


@pytest.fixture(params=FACES)
def face_of(request: pytest.FixtureRequest) -> Iterator[Callable[..., Face]]:
    made: list[Face] = []

    def make(bootstrap: str, **kwargs: Any) -> Face:
        f = Face(request.param, bootstrap, **kwargs)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


# -- version negotiation and the handshake ------------------------------------------------------------
def test_the_highest_version_both_sides_support(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    mock.broker(1).api_versions[ApiKey.FETCH] = (4, 6)
    face = face_of(mock.broker(1).bootstrap)
    conn = face("any_connection")
    assert conn.version_for(FetchRequest) == 6
    assert conn.version_for(FetchRequest, maximum=5) == 5
    del mock.broker(1).api_versions[ApiKey.FETCH]  # the next connection's broker lacks Fetch
    with pytest.raises(KafkaError) as info:
        face_of(mock.broker(1).bootstrap)("any_connection").version_for(FetchRequest)
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    api_versions = mock.broker(1).received(ApiVersionsRequest)
    assert [r.client_software_name for r in api_versions] == ["odradek", "odradek"]


def test_api_versions_falls_back_to_v0_on_unsupported_version(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    """KIP-511: a broker that does not know our ApiVersions version answers with a v0 body and
    error 35; the client asks again at v0 and takes the versions from that answer."""
    broker = mock.broker(1)
    broker.api_versions[ApiKey.API_VERSIONS] = (0, 2)
    face = face_of(broker.bootstrap)
    conn = face("any_connection")
    # the client's highest ApiVersions first (the classes may know a newer one it does not speak)
    assert [r.version for r in broker.requests if r.api_key == ApiKey.API_VERSIONS] == [
        CLIENT_MAX_VERSIONS[ApiKey.API_VERSIONS], 0
    ]
    assert conn.versions[ApiKey.API_VERSIONS] == (0, 2)
    assert conn.version_for(MetadataRequest) == min(
        MetadataRequest.VALID_VERSIONS[1], CLIENT_MAX_VERSIONS[ApiKey.METADATA]
    )


def test_sasl_plain_exchange_and_its_failure(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    @dataclass(frozen=True)
    class Plain:
        tls: ssl.SSLContext | None = None

        def sasl_client(self) -> PlainClient:
            return PlainClient("alice", "secret")

    broker = mock.broker(1)
    broker.respond(SaslHandshakeRequest, SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]), times=None)
    broker.respond(SaslAuthenticateRequest, SaslAuthenticateResponse(error_code=0, auth_bytes=b""))
    face = face_of(broker.bootstrap, security=Plain())
    face("any_connection")
    assert [r.mechanism for r in broker.received(SaslHandshakeRequest)] == ["PLAIN"]
    assert bytes(broker.received(SaslAuthenticateRequest)[0].auth_bytes) == b"\0alice\0secret"
    # wrong credentials: raised at once, no other broker tried (it would say the same)
    for b in mock.brokers.values():
        b.respond(SaslHandshakeRequest, SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]), times=None)
        b.respond(SaslAuthenticateRequest, SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message="Authentication failed: Invalid username or password",
        ), times=None)
    made = sum(b.connections_made for b in mock.brokers.values())
    with pytest.raises(KafkaError) as info:
        face_of(mock.bootstrap, security=Plain())("any_connection")
    assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED and "Invalid username" in str(info.value)
    assert sum(b.connections_made for b in mock.brokers.values()) == made + 1


def test_unreachable_bootstrap_servers_are_skipped(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    mock.broker(1).up = False
    mock.broker(2).up = False
    conn = face_of(mock.bootstrap)("any_connection")
    assert (conn.host, conn.port) == (mock.broker(3).host, mock.broker(3).port)
    mock.broker(3).up = False
    with pytest.raises(ConnectionError, match="no broker reachable: cannot connect to mock-"):
        face_of(mock.bootstrap)("any_connection")


# -- requests ----------------------------------------------------------------------------------------
def test_pipelined_requests_are_answered_in_order(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    for n in range(5):
        mock.create_topic(f"t{n}")
    # the first answer comes late: the others, ready earlier, still arrive after it
    mock.broker(1).respond(MetadataRequest, lambda req, v: Delayed(_metadata_of(mock, req, v), 0.2))
    face = face_of(mock.broker(1).bootstrap)
    conn = face("any_connection")
    requests = [MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=f"t{n}")]) for n in range(5)]
    if face.kind == "async":
        async def pipelined() -> list[Any]:
            futures = [conn.send(r) for r in requests]
            return list(await asyncio.gather(*futures))

        answers = face.loop.run_until_complete(pipelined())
    else:
        for r in requests:
            conn.send(r)
        answers = [conn.receive() for _ in requests]
    assert [a.topics[0].name for a in answers] == [f"t{n}" for n in range(5)]


def _metadata_of(mock: MockCluster, request: Any, version: int) -> MetadataResponse:
    from odradek.testing import _metadata  # the model's own answer

    return _metadata(mock, mock.broker(1), version, request)  # type: ignore[no-any-return]


def test_a_timed_out_request_closes_the_connection(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    """Answers after one that never came cannot be trusted: the connection is closed, the request
    raises TimeoutError, the next operation opens a new connection."""
    broker = mock.broker(1)
    face = face_of(broker.bootstrap, request_timeout_ms=300)
    conn = face("any_connection")
    broker.respond(MetadataRequest, NO_ANSWER)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=f"no response from {broker.host}"):
        face.conn(conn, "request", MetadataRequest(topics=[]))
    assert time.monotonic() - t0 < 5
    assert conn.closed
    with pytest.raises(ConnectionError):
        face.conn(conn, "request", MetadataRequest(topics=[]))
    again = face("any_connection")
    assert again is not conn and not again.closed
    assert broker.connections_made == 2


def test_a_dropped_connection_fails_what_waits_on_it(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    broker = mock.broker(1)
    face = face_of(broker.bootstrap)
    conn = face("any_connection")
    broker.respond(MetadataRequest, DISCONNECT)
    with pytest.raises(ConnectionError):
        face.conn(conn, "request", MetadataRequest(topics=[]))
    assert conn.closed
    # a broker restart: every open connection goes; the cluster reconnects
    conn = face("any_connection")
    broker.drop_connections()
    with pytest.raises(ConnectionError):
        face.conn(conn, "request", MetadataRequest(topics=[]))
    assert face("metadata", []).cluster_id == "mock-cluster"


def test_large_responses_are_read_into_reused_buffers(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    from odradek.records import BatchBuilder

    mock.create_topic("big")
    b = BatchBuilder()
    b.append(0, None, b"v" * 300_000)
    mock.append("big", 0, b.build())
    face = face_of(mock.broker(1).bootstrap)
    conn = face("leader_connection", "big", 0)
    fetch = FetchRequest(max_wait_ms=0, topics=[FetchRequest.FetchTopic(topic="big", partitions=[
        FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    ])])
    resp = face.conn(conn, "request", fetch, 12)
    records = resp.responses[0].partitions[0].records
    assert isinstance(records, memoryview) and len(records) > 300_000
    first = id(records.obj)
    assert first in {id(spare) for spare in FRAMES._spare}  # read into one of the shared spares
    del resp, records
    again = face.conn(conn, "request", fetch, 12).responses[0].partitions[0].records
    assert id(again.obj) == first  # nothing referred to it any more: reused


# -- metadata ----------------------------------------------------------------------------------------
def test_refresh_forgets_brokers_that_left(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    mock.create_topic("t", partitions=3)
    face = face_of(mock.bootstrap)
    face("refresh", ["t"])
    conns = {n: face("connection", n) for n in (1, 2, 3)}
    assert face.cluster.leader("t", 1) == 2
    gone = mock.brokers.pop(3)
    face("refresh")
    assert conns[3].closed and not conns[1].closed and 3 not in face.cluster.brokers
    mock.brokers[3] = gone
    with pytest.raises(KafkaError) as info:
        face("connection", 7)
    assert info.value.code == ErrorCode.BROKER_NOT_AVAILABLE


def test_topic_waits_for_a_topic_being_created(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    asked = 0

    def creating(req: Any, version: int) -> Any:
        nonlocal asked
        asked += 1
        if asked == 3:
            mock.create_topic("late", partitions=2)
        return None  # the model answers (UNKNOWN_TOPIC_OR_PARTITION until the topic exists)

    face = face_of(mock.bootstrap, retry_backoff_ms=10)
    face("any_connection")
    for b in mock.brokers.values():
        b.respond(MetadataRequest, creating, times=None)
    info = face("topic", "late")
    assert sorted(info.partitions) == [0, 1] and asked == 3
    with pytest.raises(KafkaError) as err:
        face("topic", "never", wait_ms=100)
    assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- coordinators ------------------------------------------------------------------------------------
def test_coordinator_lookup_retries_until_the_coordinator_is_there(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    """COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR are asked again (after the backoff); the
    answer's broker is connected to, its address remembered."""
    mock.coordinators[(0, "g")] = 2
    errors = iter([ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR])

    def not_yet(req: Any, version: int) -> Any:
        code = next(errors, None)
        if code is None:
            return None
        return FindCoordinatorResponse(coordinators=[FindCoordinatorResponse.Coordinator(key="g", error_code=code, node_id=-1, host="", port=-1)])

    for b in mock.brokers.values():
        b.respond(FindCoordinatorRequest, not_yet, times=None)
    face = face_of(mock.bootstrap, retry_backoff_ms=10)
    conn = face("coordinator", "g")
    assert (conn.node_id, conn.host) == (2, mock.broker(2).host)
    asked = [r for b in mock.brokers.values() for r in b.received(FindCoordinatorRequest)]
    assert len(asked) == 3 and all(r.coordinator_keys == ["g"] for r in asked)


def test_coordinator_lookup_gives_up(mock: MockCluster, face_of: Callable[..., Face]) -> None:
    def answer(code: ErrorCode) -> Any:
        return FindCoordinatorResponse(coordinators=[FindCoordinatorResponse.Coordinator(
            key="g", error_code=code, node_id=-1, host="", port=-1, error_message="no",
        )])

    face = face_of(mock.bootstrap, retry_backoff_ms=10)
    for b in mock.brokers.values():
        b.respond(FindCoordinatorRequest, answer(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    with pytest.raises(KafkaError) as info:
        face("coordinator", "g")
    assert info.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED  # at once: not retriable
    for b in mock.brokers.values():
        b.respond(FindCoordinatorRequest, answer(ErrorCode.COORDINATOR_NOT_AVAILABLE), times=None)
    t0 = time.monotonic()
    with pytest.raises(KafkaError) as info:
        face("coordinator", "g", deadline=time.monotonic() + 0.2)
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "no coordinator for group g" in str(info.value)
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("max_version", [3, 4])
def test_find_coordinators_batched_from_v4_one_per_key_before(
    mock: MockCluster, face_of: Callable[..., Face], max_version: int
) -> None:
    broker = mock.broker(1)
    broker.api_versions[ApiKey.FIND_COORDINATOR] = (0, max_version)
    mock.coordinators[(TRANSACTION, "b")] = 3
    face = face_of(broker.bootstrap)
    conn = face("any_connection")
    answers = face("find_coordinators", conn, ["a", "b"], TRANSACTION)
    assert [(a.key, a.error_code, a.node_id) for a in answers] == [("a", 0, 1), ("b", 0, 3)]
    asked = broker.received(FindCoordinatorRequest)
    if max_version >= 4:
        assert [(r.key_type, r.coordinator_keys) for r in asked] == [(TRANSACTION, ["a", "b"])]
    else:
        assert [(r.key_type, r.key) for r in asked] == [(TRANSACTION, "a"), (TRANSACTION, "b")]


# -- the inter-broker channel ------------------------------------------------------------------------
def test_channel_connects_when_used_and_again_after_a_failure(mock: MockCluster) -> None:
    broker = mock.broker(1)

    async def main() -> None:
        ch = Channel(broker.host, broker.port, client_id="controller-1", timeout=0.3,
                     versions={ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2)})
        assert not ch.connected and broker.connections_made == 0
        resp = await ch.request(MetadataRequest(topics=[]), 9)
        assert resp.cluster_id == "mock-cluster" and ch.connected
        broker.respond(MetadataRequest, NO_ANSWER)
        with pytest.raises(TimeoutError):
            await ch.request(MetadataRequest(topics=[]), 9)
        assert not ch.connected
        assert (await ch.request(MetadataRequest(topics=[]), 9)).cluster_id == "mock-cluster"
        assert broker.connections_made == 2
        assert broker.received(ApiVersionsRequest) == []  # the versions were given
        broker.up = False
        await ch.close()
        with pytest.raises(ConnectionError, match="cannot connect to"):
            await ch.request(MetadataRequest(topics=[]), 9)
        await ch.close()

    asyncio.run(main())


def test_channel_authentication_failure_is_a_connection_error(mock: MockCluster) -> None:
    @dataclass(frozen=True)
    class Plain:
        tls: ssl.SSLContext | None = None

        def sasl_client(self) -> PlainClient:
            return PlainClient("broker", "wrong")

    broker = mock.broker(1)
    broker.respond(SaslHandshakeRequest, SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]))
    broker.respond(SaslAuthenticateRequest, SaslAuthenticateResponse(
        error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message="Invalid username or password",
    ))

    async def main() -> None:
        ch = Channel(broker.host, broker.port, client_id="broker-2", security=Plain(),
                     versions={ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2)})
        with pytest.raises(ConnectionError, match=r"authentication with .* failed: .*Invalid username"):
            await ch.request(MetadataRequest(topics=[]), 9)
        assert [r.version for r in broker.requests] == [1, 2]  # SaslHandshake v1, SaslAuthenticate v2
        await ch.close()

    asyncio.run(main())


def test_the_blocking_cluster_serves_several_threads(mock: MockCluster) -> None:
    """Spark tasks read in threads: the blocking face's operations go one at a time over its
    shared connections, so concurrent callers each get their own answers."""
    import threading

    for n in range(4):
        mock.create_topic(f"t{n}", partitions=n + 1)
    for b in mock.brokers.values():  # answers that take a while: the threads' requests overlap
        b.respond(MetadataRequest, lambda req, v: Delayed(_metadata_of(mock, req, v), 0.002), times=None)
    cluster = Cluster(mock.bootstrap, client_id="threads", timeout=5)
    failures: list[BaseException] = []

    def ask(n: int) -> None:
        try:
            for _ in range(25):
                md = cluster.metadata([f"t{n}"])
                assert [t.name for t in md.topics] == [f"t{n}"] and len(md.topics[0].partitions) == n + 1
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    cluster.close()
    assert not failures, failures[:3]
