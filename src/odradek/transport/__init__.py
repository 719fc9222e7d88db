"""Client-side connections to brokers: the one transport of the clients, the broker's channels to
other brokers, the CLI, the Spark executors and the test wire client.

Layer: below ``client`` and ``broker``, above ``coordination``; built on the sans-I/O codec of
:mod:`odradek.protocol` and the SASL mechanisms of :mod:`odradek.security`.  The only client-side
code that opens sockets (:mod:`odradek.transport.connect`), and where the broker's and the console's
servers bind theirs (:mod:`odradek.transport.listen`).

* :class:`AsyncBrokerConnection` — one pipelined connection on an asyncio event loop;
  :class:`BrokerConnection` — the same on a blocking socket in the caller's thread.  Both are a
  :class:`~odradek.transport.session.Session` (codec, version negotiation, handshake: ApiVersions
  with the v0 fallback, SASL; TLS from the :class:`Security` given) plus their I/O.
* :class:`AsyncCluster` / :class:`Cluster` — bootstrap, metadata cache and refresh, one
  connection per broker, topic and leader lookup, coordinator lookup (:mod:`~odradek.transport.coordinator`).
* :class:`Channel` — a connection that opens itself when used (the broker's inter-broker channels).

Every operation of several round trips is written once as a procedure and run by either face
(:mod:`odradek.transport._ops`): the blocking face is the same code with another I/O loop, not a
second implementation.  :func:`~odradek.transport.connect.add_endpoint` puts an in-process peer at an
address (``odradek.testing.MockCluster``: the client stack tested without sockets).
"""

from odradek.transport._buffers import FRAMES, SMALL_FRAME
from odradek.transport.aio import AsyncBrokerConnection
from odradek.transport.blocking import BrokerConnection
from odradek.transport.channel import Channel
from odradek.transport.cluster import AsyncCluster, Cluster, ClusterView, PartitionInfo, TopicInfo
from odradek.transport.connect import BlockingStream, Endpoint, add_endpoint, remove_endpoint
from odradek.transport.coordinator import GROUP, TRANSACTION, CoordinatorAnswer
from odradek.transport.session import TXN_V2_VERSIONS, Security, Session, negotiate_version, parse_bootstrap

__all__ = [
    "FRAMES",
    "GROUP",
    "SMALL_FRAME",
    "TRANSACTION",
    "TXN_V2_VERSIONS",
    "AsyncBrokerConnection",
    "AsyncCluster",
    "BlockingStream",
    "BrokerConnection",
    "Channel",
    "Cluster",
    "ClusterView",
    "CoordinatorAnswer",
    "Endpoint",
    "PartitionInfo",
    "Security",
    "Session",
    "TopicInfo",
    "add_endpoint",
    "negotiate_version",
    "parse_bootstrap",
    "remove_endpoint",
]
