"""What one connection to a broker knows, apart from its I/O: the codec, the negotiated versions
and the handshake.

:class:`Session` is the sans-I/O core both connection classes are built on
(:class:`~odradek.transport.AsyncBrokerConnection` on an event loop,
:class:`~odradek.transport.BrokerConnection` on a blocking socket): correlation ids and the
requests in flight (:class:`~odradek.protocol.ClientConnection`), the versions the broker
offers, the highest common version of each API (:func:`negotiate_version`) and the handshake
every new connection goes through, as a procedure (:mod:`odradek.transport._ops`):

1. ApiVersions at the newest version this codec speaks; a broker that does not know it answers
   with a v0 body and UNSUPPORTED_VERSION (35) (read as v0 whatever version was asked, as
   Kafka's clients do), and the request is repeated at v0 (KIP-511);
2. on a SASL listener, the SASL exchange (:func:`odradek.security.sasl_exchange`: SaslHandshake
   v1, then SaslAuthenticate until the mechanism is done).

A connection created with fixed ``versions`` (the broker's channels to other brokers, which run
this same version of Odradek) skips the ApiVersions round trip; one created with
``handshake=False`` skips the handshake altogether (the test wire client, whose requests are the
test's business).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any, Protocol

from odradek import __version__
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import (
    ApiKey,
    ClientConnection,
    Message,
    ResponseReceived,
)
from odradek.protocol.connection import DEFAULT_MAX_FRAME_SIZE
from odradek.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from odradek.security import OAuthBearerClient, PlainClient, ScramClient, sasl_exchange

from ._ops import Call, Procedure

__all__ = ["TXN_V2_VERSIONS", "Security", "Session", "negotiate_version", "parse_bootstrap"]

SaslMechanism = PlainClient | ScramClient | OAuthBearerClient


class Security(Protocol):
    """What a connection needs of its listener's security: the TLS context (None: plaintext) and
    a fresh SASL mechanism for each new connection (None: no SASL)."""

    @property
    def tls(self) -> ssl.SSLContext | None: ...

    def sasl_client(self) -> SaslMechanism | None: ...


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` (IPv6 hosts in brackets) as ``[(host, port), ...]``."""
    result = []
    for item in (s.strip() for s in servers.split(",") if s.strip()):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        result.append((host.strip("[]"), int(port)))
    if not result:
        raise ValueError("no bootstrap servers given")
    return result


#: The highest version of each API Odradek's clients speak, where the message classes (generated
#: from Kafka 4.x's definitions) go further: newer versions change what a request means (topic ids
#: in Produce v13, transactions v2 in Produce v12 / EndTxn v5 / TxnOffsetCommit v5, ...), which
#: the clients do not do.  A caller that means a newer version passes it explicitly.
CLIENT_MAX_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 11,
    ApiKey.FETCH: 17,
    ApiKey.LIST_OFFSETS: 10,
    ApiKey.METADATA: 12,
    ApiKey.OFFSET_COMMIT: 9,
    ApiKey.OFFSET_FETCH: 9,
    ApiKey.API_VERSIONS: 4,
    ApiKey.INIT_PRODUCER_ID: 5,
    ApiKey.TXN_OFFSET_COMMIT: 4,
    ApiKey.END_TXN: 4,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.DESCRIBE_CLUSTER: 1,
    ApiKey.DESCRIBE_LOG_DIRS: 4,
    ApiKey.LIST_TRANSACTIONS: 1,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 1,  # v1: allow_replication_factor_change (KIP-860)
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
}

#: The versions a transactional producer using transactions v2 (KIP-890 part 2) speaks, when the
#: broker finalizes ``transaction.version`` 2 or above: Produce v12 adds a partition to the
#: transaction by itself, EndTxn v5 bumps the epoch, TxnOffsetCommit v5 needs no AddOffsetsToTxn.
TXN_V2_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 12,
    ApiKey.END_TXN: 5,
    ApiKey.TXN_OFFSET_COMMIT: 5,
}


def negotiate_version(
    versions: Mapping[int, tuple[int, int]], cls: type[Message], maximum: int | None, who: str,
    caps: Mapping[int, int] | None = None,
) -> int:
    """The highest version of ``cls`` both sides support (from the broker's ApiVersions answer),
    capped at ``maximum`` and at :data:`CLIENT_MAX_VERSIONS` (or ``caps`` where it names the API,
    e.g. :data:`TXN_V2_VERSIONS`); UNSUPPORTED_VERSION when there is none."""
    broker = versions.get(cls.API_KEY)
    if broker is None:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"{who} does not support {cls.NAME}")
    lo = max(broker[0], cls.VALID_VERSIONS[0])
    ours = CLIENT_MAX_VERSIONS.get(cls.API_KEY, cls.VALID_VERSIONS[1])
    if caps is not None and cls.API_KEY in caps:
        ours = min(caps[cls.API_KEY], cls.VALID_VERSIONS[1])
    hi = min(broker[1], ours, maximum if maximum is not None else 1 << 15)
    if lo > hi:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"no {cls.NAME} version in common with {who}")
    return hi


class Session:
    """The sans-I/O state of one connection (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        *,
        client_id: str | None,
        timeout: float,
        security: Security | None = None,
        versions: Mapping[int, tuple[int, int]] | None = None,
        handshake: bool = True,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        #: the broker's id (-1: a bootstrap server, or a peer whose id does not matter)
        self.node_id = node_id
        self.host, self.port = host, port
        self.client_id = client_id
        #: seconds to wait for a response (the request timeout)
        self.timeout = timeout
        self.security = security
        self.max_frame_size = max_frame_size
        #: api key -> (min, max) version the broker offers
        self.versions: dict[int, tuple[int, int]] = dict(versions or {})
        #: feature -> the level the broker finalizes it at (from ApiVersions v3+)
        self.finalized: dict[str, int] = {}
        self._negotiate = handshake and versions is None
        self._authenticate = handshake
        #: correlation ids and the requests in flight
        self.codec = ClientConnection(client_id=client_id)
        self.closed = False
        #: why the connection closed (None while open, or when closed by its owner)
        self.error: BaseException | None = None

    @property
    def who(self) -> str:
        """The peer, for messages: ``broker 3`` or ``host:port``."""
        return f"broker {self.node_id}" if self.node_id >= 0 else f"{self.host}:{self.port}"

    @property
    def where(self) -> str:
        """The peer with its address: ``broker 3 (host:port)`` or ``host:port``."""
        return f"broker {self.node_id} ({self.host}:{self.port})" if self.node_id >= 0 else f"{self.host}:{self.port}"

    def version_for(self, cls: type[Message], maximum: int | None = None, caps: Mapping[int, int] | None = None) -> int:
        """The version of ``cls`` to send: the highest both sides support, capped at ``maximum``
        (``caps``: other client caps than :data:`CLIENT_MAX_VERSIONS`, see :func:`negotiate_version`)."""
        return negotiate_version(self.versions, cls, maximum, self.who, caps)

    def feature_level(self, name: str) -> int:
        """The level the broker finalizes feature ``name`` at (ApiVersions v3+; 0: not finalized,
        or a broker that does not say)."""
        return self.finalized.get(name, 0)

    def receive_frame(self, payload: bytearray | memoryview) -> ResponseReceived:
        """The response in ``payload`` (a frame without its size prefix), answering the oldest
        request in flight (an ApiVersions answered in v0, KIP-511, is read as v0 by the codec)."""
        return self.codec.receive_frame(payload)

    def handshake(self) -> Procedure[None]:
        """ApiVersions (unless the versions are known) and the SASL exchange (on a SASL listener)."""
        if self._negotiate:
            resp: ApiVersionsResponse = yield Call(
                ApiVersionsRequest(client_software_name="odradek", client_software_version=__version__),
                CLIENT_MAX_VERSIONS[ApiKey.API_VERSIONS],
            )
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
                resp = yield Call(ApiVersionsRequest(), 0)
            if resp.error_code:
                raise KafkaError(resp.error_code, "ApiVersions failed")
            self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            self.finalized = {f.name: f.max_version_level for f in resp.finalized_features or ()}
        if not self._authenticate or self.security is None:
            return
        steps = sasl_exchange(self.security.sasl_client(), self.version_for)
        try:
            step = next(steps)
            while True:
                response: Any = yield Call(*step)  # the response to the exchange's request
                step = steps.send(response)
        except StopIteration:
            pass
