"""What a listener's ApiVersions answer says, and which requests it serves.

Every API with a handler (:func:`~odradek.broker.dispatch.supported_versions`, at the versions
the handler accepts), except:

* the ZooKeeper-era controller-to-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
  ControlledShutdown), on any listener but the inter-broker one (``inter.broker.listener.name``,
  else the first listener: the one this broker's own connections use): Kafka 4 shows clients none
  of them, and such a request there is refused as an unknown API;
* an API a feature switches on (:data:`~odradek.cluster.features.GATED_APIS`) while the
  cluster's finalized level is below it;
* GetTelemetrySubscriptions / PushTelemetry (KIP-714) when the broker exports no metrics
  (``metrics.enabled=false``): as Kafka, which shows them only with a telemetry receiver.

From v3 the answer also lists the features this broker supports and the cluster's finalized
levels with their epoch (:mod:`odradek.cluster.features`); before v4, as Kafka (KAFKA-17492),
supported features whose lowest level is 0 are left out (older clients could not parse them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.broker.dispatch import HANDLERS, supported_versions
from odradek.cluster.features import FEATURES, GATED_APIS, INTER_BROKER_APIS, finalized_levels
from odradek.protocol import ApiKey
from odradek.protocol.messages.api_versions import ApiVersionsResponse

if TYPE_CHECKING:
    from odradek.broker.ports import FeaturesPort
    from odradek.settings import Settings

__all__ = ["RESTRICTED_APIS", "api_versions_response", "inter_broker_listener", "served"]

_TELEMETRY = frozenset({ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY})
#: the API keys whose availability depends on the listener or on the cluster's state
RESTRICTED_APIS = frozenset({*INTER_BROKER_APIS, *GATED_APIS, *_TELEMETRY})


def inter_broker_listener(settings: Settings) -> str | None:
    """The listener other brokers (and the controller) reach this one on."""
    name = settings.socket.inter_broker_listener_name
    if name:
        return name.upper()
    listeners = settings.socket.listener_endpoints
    return listeners[0].name.upper() if listeners else None


def served(port: FeaturesPort | None, listener: str | None, api_key: int) -> bool:
    """Whether a request of ``api_key`` (one with a handler) is served on ``listener`` now."""
    if api_key not in RESTRICTED_APIS or port is None:
        return True
    if api_key in INTER_BROKER_APIS:
        return listener is None or listener.upper() == port.inter_broker_listener
    if api_key in _TELEMETRY:
        return port.telemetry
    feature, level = GATED_APIS[api_key]
    return finalized_levels(port.metadata.image.features).get(feature, 0) >= level


#: the answer's lists, by what they depend on (every client's first request asks for them: built
#: once, not per connection); the entries are shared by the answers and never changed
_R = ApiVersionsResponse
_Lists = tuple[tuple[_R.ApiVersion, ...], tuple[_R.SupportedFeatureKey, ...], tuple[_R.FinalizedFeatureKey, ...]]
_LISTS: dict[tuple[object, ...], _Lists] = {}
_LISTS_BOUND = 64  # a few listeners x feature levels; past it the cache starts again


def api_versions_response(
    error_code: int = 0, port: FeaturesPort | None = None, listener: str | None = None, version: int = 0
) -> ApiVersionsResponse:
    """The ApiVersions answer on ``listener`` at ``version`` (without ``port``: every API with a
    handler, no features)."""
    R = ApiVersionsResponse
    image = port.metadata.image if port is not None else None
    levels = finalized_levels(image.features) if image is not None else {}
    key: tuple[object, ...] = (
        None if port is None else (port.inter_broker_listener, port.telemetry),
        listener.upper() if listener is not None else None,
        version >= 4,
        tuple(levels.items()),
        len(HANDLERS),
    )
    lists = _LISTS.get(key)
    if lists is None:
        keys = tuple(
            R.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in supported_versions().items()
            if served(port, listener, k)
        )
        supported = tuple(
            R.SupportedFeatureKey(name=f.name, min_version=f.min_level, max_version=f.max_level)
            for f in sorted(FEATURES.values(), key=lambda f: f.name)
            if version >= 4 or f.min_level > 0
        )
        finalized = tuple(
            R.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
            for name, level in levels.items()
        )
        if len(_LISTS) >= _LISTS_BOUND:
            _LISTS.clear()
        lists = _LISTS[key] = (keys, supported, finalized)
    response = R(error_code=error_code, api_keys=list(lists[0]))
    if image is not None and version >= 3:
        response.supported_features = list(lists[1])
        response.finalized_features = list(lists[2])
        response.finalized_features_epoch = image.features_epoch
    return response
