"""Feature flags (KIP-584) as Odradek implements them: the one table of which features, and of
which APIs gated by a feature, this broker serves, and the rules of changing a finalized level.

A Kafka 4 broker lists in ApiVersions (v3+) the features it *supports* (a range of levels) and
the cluster's *finalized* levels with their epoch; a 4.x client chooses its protocols from the
finalized ones: ``transaction.version`` 2 turns on transactions v2 (KIP-890 part 2: Produce v12,
EndTxn v5, TxnOffsetCommit v5), ``group.version`` 1 the consumer group protocol (KIP-848).

:data:`FEATURES` says, per feature, the levels this code implements (``max_level``) and the level
a cluster that never changed it has (``default_level``: Kafka's bootstrap level for a new
cluster at the ``metadata.version`` Odradek claims).  A part of the code that starts to implement
a feature raises its ``max_level`` (and ``default_level``) here, and nowhere else; an API that a
feature switches on is listed in :data:`GATED_APIS`, advertised and served only while the
finalized level allows it (Kafka answers such APIs UNSUPPORTED_VERSION otherwise).

The levels a cluster finalized are stored by the metadata backend (ZooKeeper's ``/feature``
znode, Kafka's FeatureZNode v2; the embedded store's file) only once an operator changes one
(UpdateFeatures, ``odradek features upgrade|downgrade``): :func:`finalized_levels` lays them over
the defaults.  :func:`check_update` is the controller's validation (Kafka's
FeatureControlManager), with Kafka's messages.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey

__all__ = [
    "FEATURES",
    "GATED_APIS",
    "GROUP_VERSION",
    "INTER_BROKER_APIS",
    "METADATA_VERSION",
    "METADATA_VERSIONS",
    "SHARE_VERSION",
    "TRANSACTION_VERSION",
    "Feature",
    "UpgradeType",
    "check_update",
    "finalized_levels",
    "level_name",
    "parse_level",
]

METADATA_VERSION = "metadata.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"

#: Kafka's metadata.version levels (MetadataVersion): level -> (name, whether it changed the
#: metadata records: a downgrade across such a level could lose metadata and is refused)
METADATA_VERSIONS: Mapping[int, tuple[str, bool]] = {
    7: ("3.3-IV3", True), 8: ("3.4-IV0", True), 9: ("3.5-IV0", False), 10: ("3.5-IV1", False),
    11: ("3.5-IV2", True), 12: ("3.6-IV0", False), 13: ("3.6-IV1", True), 14: ("3.6-IV2", True),
    15: ("3.7-IV0", True), 16: ("3.7-IV1", False), 17: ("3.7-IV2", True), 18: ("3.7-IV3", False),
    19: ("3.7-IV4", False), 20: ("3.8-IV0", False), 21: ("3.9-IV0", False), 22: ("4.0-IV0", False),
    23: ("4.0-IV1", True), 24: ("4.0-IV2", False), 25: ("4.0-IV3", False),
}


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    #: the levels this broker implements (what ApiVersions lists as supported)
    min_level: int
    max_level: int
    #: the finalized level of a cluster that never changed it
    default_level: int


#: Odradek's features.  metadata.version: Odradek answers as a Kafka 4.0 broker at 4.0-IV3 (the
#: level that makes transaction.version 2 and group.version 1 the bootstrap levels); it has no
#: metadata log of its own, the level only names the protocol generation.  kraft.version is
#: absent: there is no KRaft quorum.  group.version 1 is the consumer group protocol (KIP-848),
#: share.version 1 share groups (KIP-932); ELR and streams groups are not implemented (0 only).
FEATURES: Mapping[str, Feature] = {
    f.name: f
    for f in (
        Feature(METADATA_VERSION, 7, 25, 25),
        Feature(TRANSACTION_VERSION, 0, 2, 2),
        Feature(GROUP_VERSION, 0, 1, 1),  # KIP-848: the consumer group protocol
        Feature("eligible.leader.replicas.version", 0, 0, 0),
        Feature(SHARE_VERSION, 0, 1, 1),  # KIP-932: share groups
        Feature("streams.version", 0, 0, 0),
    )
}

#: APIs a feature switches on: api key -> (feature, lowest level); below it they are neither
#: advertised nor served
GATED_APIS: Mapping[int, tuple[str, int]] = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (GROUP_VERSION, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (GROUP_VERSION, 1),
    # KIP-932 share groups: membership, fetch/acknowledge, and the share-group offset admin APIs
    ApiKey.SHARE_GROUP_HEARTBEAT: (SHARE_VERSION, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (SHARE_VERSION, 1),
    ApiKey.SHARE_FETCH: (SHARE_VERSION, 1),
    ApiKey.SHARE_ACKNOWLEDGE: (SHARE_VERSION, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (SHARE_VERSION, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (SHARE_VERSION, 1),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (SHARE_VERSION, 1),
}

#: the ZooKeeper-era controller-to-broker APIs: advertised and served on the inter-broker
#: listener only (Kafka 4 shows clients none of them)
INTER_BROKER_APIS = frozenset({
    ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN,
})


class UpgradeType(enum.IntEnum):
    """UpdateFeatures' ``UpgradeType`` (v1+; v0's ``AllowDowngrade`` is SAFE_DOWNGRADE)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


def finalized_levels(stored: Mapping[str, int] | None) -> dict[str, int]:
    """The cluster's finalized levels: the stored ones (every feature, once an operator changed
    one), else the defaults; level 0 means not finalized and is left out (as Kafka lists them)."""
    levels = {name: f.default_level for name, f in FEATURES.items()} if stored is None else dict(stored)
    return {name: level for name, level in sorted(levels.items()) if level > 0}


def level_name(feature: str, level: int) -> str:
    """``4.0-IV3`` for a metadata.version level, the number for the others."""
    if feature == METADATA_VERSION and level in METADATA_VERSIONS:
        return METADATA_VERSIONS[level][0]
    return str(level)


def parse_level(feature: str, text: str) -> int:
    """A level as an operator writes it: a number, or a metadata.version name (``4.0-IV3``, or
    a release ``4.0``: its last level)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if feature == METADATA_VERSION:
        named = [lvl for lvl, (name, _changed) in METADATA_VERSIONS.items() if name == text or name.startswith(text + "-")]
        if named:
            return max(named)
    raise ValueError(f"{text!r} is not a level of {feature}")


def _invalid(feature: str, level: int, why: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid update version {level} for feature {feature}. {why}")


def _supported(feature: Feature | None, level: int) -> str | None:
    if feature is None:
        return "Local broker does not support this feature."
    if not feature.min_level <= level <= feature.max_level:
        if feature.max_level == 0:
            return "Local broker does not support this feature."
        return f"Local broker only supports versions [{feature.min_level}-{feature.max_level}]"
    return None


def check_update(current: Mapping[str, int], name: str, level: int, upgrade: UpgradeType) -> None:
    """Whether the finalized level of ``name`` may become ``level`` (``current``: the finalized
    levels, see :func:`finalized_levels`); INVALID_UPDATE_VERSION with Kafka's message if not."""
    if upgrade is UpgradeType.UNKNOWN:
        raise _invalid(name, level, "The controller does not support the given upgrade type.")
    have = current.get(name, 0)
    if level < 0:
        raise _invalid(name, level, "A feature version cannot be less than 0.")
    feature = FEATURES.get(name)
    why = _supported(feature, level)
    if why is not None:
        raise _invalid(name, level, why)
    if level < have and upgrade is UpgradeType.UPGRADE:
        raise _invalid(
            name, level,
            "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe "
            "downgrade.",
        )
    if level > have and upgrade is not UpgradeType.UPGRADE:
        raise _invalid(name, level, "Can't downgrade to a newer version.")
    if name == METADATA_VERSION:
        if level not in METADATA_VERSIONS:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid metadata.version {level}. Unknown metadata.version.")
        if level < have and any(METADATA_VERSIONS.get(v, ("", True))[1] for v in range(level + 1, have + 1)):
            if upgrade is UpgradeType.UNSAFE_DOWNGRADE:
                raise KafkaError(
                    ErrorCode.INVALID_UPDATE_VERSION,
                    f"Invalid metadata.version {level}. Unsafe metadata downgrade is not supported in this version.",
                )
            raise KafkaError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"Invalid metadata.version {level}. Refusing to perform the requested downgrade because it might "
                "delete metadata information.",
            )
