"""Connection quotas, as Kafka's ConnectionQuotas applies them at accept time.

* ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``, ``host:count,...``):
  a connection beyond an address's count is closed at once, with a log line;
* ``max.connections`` for the broker and ``listener.name.<l>.max.connections`` per listener:
  beyond them, a listener stops accepting until a connection closes (clients wait in the
  kernel's backlog; nothing is refused);
* ``max.connection.creation.rate`` per listener (and for the broker): new connections per second;
  beyond it, accepting waits until the rate over the last second allows one more (KIP-612);
* the ``connection_creation_rate`` client quota of an IP (``ips/<ip>``, else ``ips/<default>``,
  kept with the other client quotas): measured as Kafka's quota rates are
  (``quota.window.num`` windows of ``quota.window.size.seconds``), a connection beyond it is
  closed at once, with a log line (KIP-612).

The inter-broker listener is exempt from the broker-wide counts, as in Kafka, so followers and the
controller always get in.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping

from odradek.cluster.metadata import MetadataImage
from odradek.config import ConfigError
from odradek.security.quota import CONNECTION_CREATION_RATE, DEFAULT, Sensor
from odradek.settings import Settings

__all__ = ["ConnectionQuotas"]

log = logging.getLogger("odradek.connections")

UNLIMITED = 2147483647


def parse_overrides(text: str | None) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count`` (hosts resolved to IPs)."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        try:
            addresses = {str(info[4][0]) for info in socket.getaddrinfo(host.strip("[] "), None)}
        except OSError:
            raise ConfigError(f"max.connections.per.ip.overrides: cannot resolve {host!r}") from None
        for address in addresses:
            out[address] = int(count)
    return out


class ConnectionQuotas:
    def __init__(
        self, settings: Settings, listeners: list[str], inter_broker: str | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``settings``: the broker's (max.connections and max.connection.creation.rate are read
        per listener too, as ``listener.name.<listener>.max.connections``)."""
        socket_settings = settings.socket
        self.per_ip = socket_settings.max_connections_per_ip
        self.overrides: Mapping[str, int] = parse_overrides(socket_settings.max_connections_per_ip_overrides)
        self.broker_max = socket_settings.max_connections
        self.broker_rate = socket_settings.max_connection_creation_rate
        self.listener_max = {name: settings.for_listener(name).socket.max_connections for name in listeners}
        self.listener_rate = {name: settings.for_listener(name).socket.max_connection_creation_rate for name in listeners}
        self.inter_broker = inter_broker
        self.clock = clock
        self.by_ip: dict[str, int] = defaultdict(int)
        self.by_listener: dict[str, int] = defaultdict(int)
        self.total = 0  # broker-wide count (without the inter-broker listener)
        self._ip_rates: dict[str, float] = {}  # ip (or "<default>") -> connection_creation_rate
        self._ip_sensors: dict[str, Sensor] = {}
        self._quota_source: Mapping[str, Mapping[str, float]] | None = None
        quotas = settings.quotas
        self._window = (max(2, quotas.quota_window_num), float(quotas.quota_window_size_seconds) * 1000)
        self._created: dict[str, deque[float]] = defaultdict(deque)
        self._created_all: deque[float] = deque()
        self._freed = asyncio.Condition()

    def ip_limit(self, ip: str) -> int:
        return self.overrides.get(ip, self.per_ip)

    def _counts_for_broker(self, listener: str) -> bool:
        return listener != self.inter_broker

    def has_slot(self, listener: str) -> bool:
        if self.by_listener[listener] >= self.listener_max.get(listener, UNLIMITED):
            return False
        return not (self._counts_for_broker(listener) and self.total >= self.broker_max)

    async def wait_for_slot(self, listener: str) -> None:
        """Return when ``listener`` may take one more connection (logged once while it waits)."""
        if self.has_slot(listener):
            return
        log.info(
            "listener %s stops accepting: %d connections on it (max %s), %d on the broker (max.connections %d)",
            listener, self.by_listener[listener], self.listener_max.get(listener, UNLIMITED), self.total, self.broker_max,
        )
        async with self._freed:
            await self._freed.wait_for(lambda: self.has_slot(listener))
        log.info("listener %s accepts connections again", listener)

    async def throttle(self, listener: str) -> None:
        """Wait until one more connection on ``listener`` keeps the creation rates."""
        limits = [(self._created[listener], self.listener_rate.get(listener, UNLIMITED))]
        if self._counts_for_broker(listener):
            limits.append((self._created_all, self.broker_rate))
        warned = False
        while True:
            now = self.clock()
            wait = 0.0
            for window, rate in limits:
                while window and window[0] <= now - 1.0:
                    window.popleft()
                if rate < UNLIMITED and len(window) >= rate:
                    wait = max(wait, window[0] + 1.0 - now)
            if wait <= 0:
                break
            if not warned:
                warned = True
                log.info("listener %s: max.connection.creation.rate reached, new connections wait %.3f s", listener, wait)
            await asyncio.sleep(wait)
        now = self.clock()
        for window, _rate in limits:
            window.append(now)

    def on_image(self, image: MetadataImage) -> None:
        """The IPs' ``connection_creation_rate`` quotas, from the metadata image."""
        quotas = image.client_quotas
        if quotas is self._quota_source:
            return
        self._quota_source = quotas
        rates = {}
        for path, values in quotas.items():
            if path.startswith("ips/") and CONNECTION_CREATION_RATE in values:
                rates[path[len("ips/") :]] = float(values[CONNECTION_CREATION_RATE])
        self._ip_rates = rates
        self._ip_sensors = {ip: s for ip, s in self._ip_sensors.items() if ip in rates or DEFAULT in rates}

    def _over_ip_rate(self, ip: str) -> float | None:
        """Charge one connection to ``ip``'s creation-rate quota; the quota when over it."""
        rates = self._ip_rates
        if not rates:
            return None
        bound = rates.get(ip, rates.get(DEFAULT))
        if bound is None:
            return None
        sensor = self._ip_sensors.get(ip)
        if sensor is None:
            if len(self._ip_sensors) > 100_000:
                self._ip_sensors.clear()
            sensor = self._ip_sensors[ip] = Sensor(*self._window)
        now = self.clock() * 1000.0
        rate = sensor.rate
        if rate.measure(now) >= bound:  # this one would go over: refused, and not counted
            return bound
        sensor.record(1.0, bound, now)
        return None

    def admit(self, ip: str, listener: str) -> bool:
        """Count a new connection from ``ip``; False (nothing counted) when ``ip`` is at its limit."""
        over = self._over_ip_rate(ip) if listener != self.inter_broker else None
        if over is not None:
            log.info("Rejected connection from /%s on listener %s: its connection_creation_rate quota of %g/s "
                     "is reached", ip, listener, over)
            return False
        limit = self.ip_limit(ip)
        if self.by_ip[ip] >= limit:
            log.info("Rejected connection from /%s on listener %s, address already has the configured maximum of %d connections",
                     ip, listener, limit)
            return False
        self.by_ip[ip] += 1
        self.by_listener[listener] += 1
        if self._counts_for_broker(listener):
            self.total += 1
        return True

    def release(self, ip: str, listener: str) -> None:
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]
        self.by_listener[listener] -= 1
        if self._counts_for_broker(listener):
            self.total -= 1
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._freed:
            self._freed.notify_all()
