"""The schema registry in the broker: its listener, and ``_schemas`` on the coordinator runtime.

:class:`BrokerSchemaRegistry` is built by the composition root when ``schema.registry.listeners``
asks for a listener (by default on a single node, off in a cluster).  It lends the registry
service (:mod:`odradek.registry`) what it needs of the broker:

* the store: ``_schemas`` (one partition, compacted, ``schema.registry.topic.replication.factor``
  replicas) on a :class:`~odradek.broker.coordinators.CoordinatorRuntime` with
  ``hosted_on="replicas"``: every broker hosting a replica keeps a view of it
  (:class:`RegistryShard`), replayed up to the high watermark; the partition's leader is the one
  writer; a write goes through the runtime's append with acks=all;
* the writer's address: its registry URL, which every broker writes into its ZooKeeper
  registration (``schema_registry_url`` beside the endpoints);
* the users (HTTP Basic against the broker's SASL/PLAIN users and SCRAM credentials) and the ACL
  authorizer;
* TLS (``schema.registry.ssl.*``) for the listener and for forwarding to the writer's.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from odradek._timeouts import wait_for
from odradek.broker.coordinators import (
    CoordinatorPorts,
    CoordinatorRecord,
    CoordinatorRuntime,
    CoordinatorTopic,
)
from odradek.broker.tls import registry_client_context, registry_server_context
from odradek.broker.topics import SCHEMAS_TOPIC
from odradek.config import ConfigError
from odradek.errors import ErrorCode, KafkaError
from odradek.registry.errors import RestError
from odradek.registry.metrics import RegistryMetrics
from odradek.registry.security import RegistrySecurity
from odradek.registry.service import NotWriter, RegistryService, RegistrySettings
from odradek.schemas.store import RegistryState
from odradek.security import SCRAM_MECHANISMS, ScramCredential
from odradek.security.acl import Operation, ResourceType
from odradek.settings import Settings

if TYPE_CHECKING:
    from odradek.broker.authentication import ListenerSecurity
    from odradek.broker.authorizer import Authorizer
    from odradek.cluster.metadata import MetadataImage
    from odradek.coordination import MetadataBackend

__all__ = ["DEFAULT_URL", "BrokerSchemaRegistry", "RegistryShard", "schema_registry_for"]

log = logging.getLogger("odradek.registry")

#: where the registry listens on a single node when schema.registry.listeners is not set
DEFAULT_URL = "http://127.0.0.1:8081"
#: how often a follower looks at its high watermark while a read waits for it
_SYNC_POLL_S = 0.005
#: space a record's batch takes beside its key and value
_BATCH_OVERHEAD = 200


class RegistryShard:
    """The registry's state on one broker: ``_schemas`` replayed (a CoordinatorShard)."""

    def __init__(self) -> None:
        self.state = RegistryState()
        self.ready = False

    def replay(self, record: CoordinatorRecord) -> None:
        self.state.apply(record.key, record.value, record.offset)

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        pass  # the registry never writes transactionally

    def loaded(self, now_ms: int) -> None:
        self.ready = True
        st = self.state
        log.info("schema registry: %d subjects, %d schema versions, largest id %d%s", st.live_subject_count(),
                 st.schema_count(), st.max_id, f" ({st.skipped} records skipped)" if st.skipped else "")

    def unloaded(self) -> None:
        self.ready = False


def _parse_listener(spec: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``http://host:port`` / ``https://host:port``."""
    scheme, sep, rest = spec.strip().partition("://")
    scheme = scheme.lower()
    host, _, port = rest.rstrip("/").rpartition(":")
    if not sep or scheme not in ("http", "https") or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"schema.registry.listeners: {spec!r} is not http://HOST:PORT or https://HOST:PORT")
    return scheme, host.strip("[]"), int(port)


class _Store:
    """The registry's :class:`~odradek.registry.service.SchemaStore` over the runtime."""

    def __init__(self, broker_id: int, runtime: CoordinatorRuntime[RegistryShard], backend: MetadataBackend) -> None:
        self.broker_id = broker_id
        self.runtime = runtime
        self.backend = backend
        self._writer: tuple[int, str | None] | None = None  # (leader id, its URL) looked up

    def exists(self) -> bool:
        return SCHEMAS_TOPIC in self.runtime.topics.image.topics

    async def create(self) -> None:
        try:
            await self.runtime.ensure_topic()
        except KafkaError as exc:
            raise RestError.store(f"_schemas cannot be created now: {exc.message or exc.code.name}") from None

    def _partition(self) -> Any:
        part = self.runtime.replicas.get(SCHEMAS_TOPIC, 0)
        if part is None or self.runtime.replicas.log_dirs.offline(part.log_dir):
            return None
        return part

    def _shard(self) -> RegistryShard | None:
        shard = self.runtime.shard_at(0)
        return shard if shard is not None and shard.ready else None

    def is_writer(self) -> bool:
        part = self._partition()
        return part is not None and part.is_leader and self._shard() is not None

    async def sync(self, timeout: float) -> RegistryState | None:
        part = self._partition()
        shard = self._shard()
        if part is None or shard is None:
            return None
        if not part.is_leader and self.broker_id not in part.state.isr:
            return None  # a replica out of the ISR may miss acknowledged writes: the writer answers
        target = part.log.log_end_offset
        if part.log.high_watermark < target:
            deadline = time.monotonic() + timeout
            if part.is_leader:
                try:
                    await wait_for(part.wait_for_hw(target), timeout)
                except (TimeoutError, KafkaError):
                    return None
            else:
                # a follower learns the high watermark from its fetches (no waiter is woken)
                while part.log.high_watermark < target:
                    if time.monotonic() >= deadline or self.runtime.replicas.get(SCHEMAS_TOPIC, 0) is not part:
                        return None
                    await asyncio.sleep(_SYNC_POLL_S)
        self.runtime.catch_up(0)
        shard = self._shard()
        return shard.state if shard is not None else None

    async def append(self, records: list[tuple[bytes, bytes | None]], timeout: float) -> None:
        try:
            await self.runtime.append(0, records)
        except KafkaError as exc:
            code = exc.code
            if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        ErrorCode.FENCED_LEADER_EPOCH):
                raise NotWriter() from None
            if code == ErrorCode.REQUEST_TIMED_OUT:
                raise RestError.timeout("Write to the Kafka store timed out: the _schemas replicas did not all "
                                        "acknowledge it in time") from None
            if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
                raise RestError.schema_too_large("Register operation failed because schema is too large") from None
            raise RestError.store(f"Error while writing to the Kafka store: {code.name}"
                                  f"{': ' + exc.message if exc.message else ''}") from None
        self.runtime.catch_up(0)

    def _leader_id(self) -> int | None:
        part = self.runtime.replicas.get(SCHEMAS_TOPIC, 0)
        if part is not None:
            leader = part.state.leader
        else:
            info = self.runtime.topics.image.topics.get(SCHEMAS_TOPIC)
            state = info.partitions.get(0) if info is not None else None
            leader = state.leader if state is not None else -1
        return leader if leader >= 0 else None

    async def writer_url(self) -> str | None:
        leader = self._leader_id()
        if leader is None or leader == self.broker_id:
            return None
        if self._writer is not None and self._writer[0] == leader:
            return self._writer[1]
        try:
            info = await self.backend.broker_registration(leader)
        except Exception as exc:  # the metadata store did not answer: asked again on the next try
            log.debug("the registration of broker %d could not be read: %s", leader, exc)
            return None
        url = info.registry_url if info is not None else None
        if url is None:
            log.warning("broker %d leads _schemas but runs no schema registry listener: writes cannot be forwarded "
                        "to it (set schema.registry.listeners on every broker)", leader)
        self._writer = (leader, url)
        return url

    def forget_writer(self) -> None:
        self._writer = None


class _Credentials:
    """The broker's users for HTTP Basic: PLAIN users of its listeners, SCRAM credentials."""

    def __init__(self, listeners: Mapping[str, ListenerSecurity],
                 scram: Callable[[str, str], ScramCredential | None]) -> None:
        self.listeners = list(listeners.values())
        self.scram = scram

    def check(self, user: str, password: str) -> bool:
        if any(sec.check_plain(user, password) for sec in self.listeners):
            return True
        for mechanism in SCRAM_MECHANISMS:
            stored = self.scram(user, mechanism)
            if stored is None:
                continue
            computed = ScramCredential.from_password(mechanism, password, stored.iterations, stored.salt)
            if hmac.compare_digest(computed.stored_key, stored.stored_key):
                return True
        return False

    def version(self, user: str) -> object:
        return tuple(
            (c.salt, c.stored_key) if (c := self.scram(user, m)) is not None else None for m in SCRAM_MECHANISMS
        )


class _Authorizer:
    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    def allowed(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        return self.authorizer.authorize(
            principal, host, Operation[operation], ResourceType[resource_type], name, -1, request="SchemaRegistry",
        )


class BrokerSchemaRegistry:
    """The registry of one broker: build it, :meth:`bind`, :meth:`start`, :meth:`stop`."""

    def __init__(
        self,
        broker_id: int,
        settings: Settings,
        ports: CoordinatorPorts,
        backend: MetadataBackend,
        *,
        listener: str,
        fallback_port: bool,
        replication_factor: Callable[[], int],
        listeners: Mapping[str, ListenerSecurity],
        scram: Callable[[str, str], ScramCredential | None],
        authorizer: Authorizer | None,
        secured: bool,
    ) -> None:
        self.scheme, self.host, self.port = _parse_listener(listener)
        self.fallback_port = fallback_port
        own = settings.schema_registry
        timeout_ms = own.timeout_ms
        topic = CoordinatorTopic(SCHEMAS_TOPIC, 1, replication_factor, acks=-1, write_timeout_ms=timeout_ms,
                                 hosted_on="replicas")
        self.runtime: CoordinatorRuntime[RegistryShard] = CoordinatorRuntime(topic, lambda _p: RegistryShard(), ports)
        self.store = _Store(broker_id, self.runtime, backend)
        method = own.authentication_method.upper() if own.authentication_method else ("BASIC" if secured else "NONE")
        https = self.scheme == "https"
        self.tls = registry_server_context(settings.schema_registry_ssl) if https else None
        forward_tls = registry_client_context(settings.schema_registry_ssl) if https else None
        security = RegistrySecurity(
            method, _Credentials(listeners, scram) if method == "BASIC" else None,
            _Authorizer(authorizer) if authorizer is not None else None,
            failure_delay_s=max(0, settings.security.connection_failed_authentication_delay_ms) / 1000,
            clock=ports.clock,
        )
        self.metrics = RegistryMetrics()
        max_record = settings.log.message_max_bytes - _BATCH_OVERHEAD
        registry_settings = RegistrySettings(
            compatibility_level=own.compatibility_level,
            mode_mutability=own.mode_mutability,
            max_body=own.request_max_bytes,
            timeout_s=timeout_ms / 1000,
            max_record_bytes=max_record,
        )
        self.service = RegistryService(registry_settings, self.store, security, forward_tls=forward_tls, metrics=self.metrics,
                                       clock=ports.clock)
        self.metrics.gauges = self._gauges
        self.advertised_host = self.host
        if method == "NONE" and secured:
            log.warning("schema registry: schema.registry.authentication.method=NONE on a secured broker: anyone "
                        "reaching %s may read and register schemas", listener)

    def current(self) -> RegistryState | None:
        """This broker's view of ``_schemas`` as it is (a RegistryView, for schema validation)."""
        shard = self.runtime.shard_at(0)
        return shard.state if shard is not None and shard.ready else None

    async def synced(self, timeout: float) -> RegistryState | None:
        """The view once it holds every acknowledged write (None: not in time, or no view)."""
        return await self.store.sync(timeout)

    def _gauges(self) -> tuple[int, int, bool]:
        shard = self.runtime.shard_at(0)
        if shard is None:
            return 0, 0, False
        return shard.state.schema_count(), shard.state.live_subject_count(), self.store.is_writer()

    @property
    def url(self) -> str:
        """The URL other brokers and clients reach this registry at."""
        host = self.advertised_host
        shown = f"[{host}]" if ":" in host else host
        return f"{self.scheme}://{shown}:{self.bound_port}"

    @property
    def bound_port(self) -> int:
        server = self.service.server
        return server.address[1] if server is not None else self.port

    async def bind(self, advertised_host: str) -> None:
        """Listen (port 0: a free one); ``advertised_host`` is used when the listener's host is
        a wildcard."""
        try:
            await self.service.start(self.host, self.port, self.tls)
        except OSError as exc:
            if not self.fallback_port or exc.errno != errno.EADDRINUSE:
                raise ConfigError(f"schema registry: cannot listen on {self.host}:{self.port} "
                                  f"(schema.registry.listeners): {exc.strerror or exc}") from None
            log.info("schema registry: port %d is taken; listening on a free port instead", self.port)
            await self.service.start(self.host, 0, self.tls)
        self.advertised_host = advertised_host if self.host in ("", "0.0.0.0", "::") else self.host
        log.info("schema registry at %s", self.url)

    def start(self) -> None:
        self.runtime.start()

    def on_hosting_changed(self, image: MetadataImage | None) -> None:
        self.runtime.on_hosting_changed(image)

    async def stop(self) -> None:
        self.service.close()
        await self.service.wait_closed()
        await self.runtime.stop()


def schema_registry_for(
    broker_id: int,
    settings: Settings,
    ports: CoordinatorPorts,
    backend: MetadataBackend,
    *,
    embedded: bool,
    listeners: Mapping[str, ListenerSecurity],
    scram: Callable[[str, str], ScramCredential | None],
    authorizer: Authorizer | None,
) -> BrokerSchemaRegistry | None:
    """The broker's registry as ``schema.registry.listeners`` asks (None: off)."""
    own = settings.schema_registry
    if not own.listeners_set:
        if not embedded:
            return None
        spec, fallback = DEFAULT_URL, True
    else:
        specs = list(own.listeners)
        if not specs:
            return None
        if len(specs) > 1:
            raise ConfigError("schema.registry.listeners: the registry takes one listener")
        spec, fallback = specs[0], False
    secured = authorizer is not None or any(sec.sasl for sec in listeners.values())
    rf = own.topic_replication_factor
    return BrokerSchemaRegistry(
        broker_id, settings, ports, backend, listener=spec, fallback_port=fallback,
        replication_factor=(lambda: 1) if embedded else (lambda: rf), listeners=listeners, scram=scram,
        authorizer=authorizer, secured=secured,
    )
