"""Broker-to-broker connections: the controller's channel to each broker, followers' fetchers, the
transaction coordinator's markers, controlled shutdown.

A :class:`BrokerChannel` is the transport's :class:`~odradek.transport.Channel` (connects when
used, pipelines requests, fails every pending one when the connection breaks; callers retry) with
the inter-broker settings:

* every broker in a cluster runs this version of Odradek, so requests use the versions the
  sans-I/O codec knows and there is no ApiVersions round trip; the SASL exchange of a SASL
  inter-broker listener uses SaslHandshake v1 and SaslAuthenticate v2;
* responses arrive through a receive buffer of 256 KiB, and a large one (a follower's fetch of
  megabytes) straight into a buffer of its own, reused once its records are appended, so the
  kernel's copy is the only one.  Those buffers are this process's broker's own (one event loop
  uses them: no lock), not the spares client connections share.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from odradek.protocol.connection import FrameBuffers
from odradek.protocol.messages import ApiKey
from odradek.security import PlainClient, ScramClient
from odradek.transport import Channel

__all__ = ["BrokerChannel", "ChannelSecurity"]

#: the versions of the SASL exchange between brokers (every broker runs this version)
_SASL_VERSIONS: dict[int, tuple[int, int]] = {ApiKey.SASL_HANDSHAKE: (1, 1), ApiKey.SASL_AUTHENTICATE: (2, 2)}
#: responses of this size or more go straight into a buffer of their own (from the spares every
#: channel of this broker's event loop shares)
_RECEIVE_SIZE = 256 * 1024
_LARGE_FRAME = 64 * 1024
_FRAME_BUFFERS = FrameBuffers(32 << 20)


@dataclass(frozen=True)
class ChannelSecurity:
    """How brokers reach each other: the inter-broker listener's TLS and SASL."""

    tls: ssl.SSLContext | None = None
    #: a fresh SASL mechanism for each connection (None: no SASL)
    sasl: Callable[[], PlainClient | ScramClient] | None = None

    def sasl_client(self) -> PlainClient | ScramClient | None:
        return self.sasl() if self.sasl is not None else None


class BrokerChannel(Channel):
    """Requests to another broker at ``host:port`` (see the module docstring)."""

    def __init__(
        self, host: str, port: int, *, client_id: str, timeout: float = 30.0, security: ChannelSecurity | None = None
    ) -> None:
        super().__init__(
            host, port, client_id=client_id, timeout=timeout, security=security, versions=_SASL_VERSIONS,
            receive_size=_RECEIVE_SIZE, large=_LARGE_FRAME, buffers=_FRAME_BUFFERS,
        )
