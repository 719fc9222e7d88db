"""UpdateFeatures (57), v0-2: an operator changes the cluster's finalized feature levels
(KIP-584; ``odradek features upgrade|downgrade``, ``kafka-features.sh``).

Any broker takes the request (a Kafka 4 broker forwards it to the controller): the levels are
checked against :mod:`odradek.cluster.features` (the levels this broker implements, downgrades
only when asked for, metadata.version never across a level that changed the metadata) and
written by the metadata store with a compare-and-set, so two changes at once cannot lose one.
As Kafka's controller does, a refused change refuses the whole request with a top-level
INVALID_UPDATE_VERSION and Kafka's message (v0-1 also list each feature, with no error of its
own); ``ValidateOnly`` checks without writing.  Alter on the cluster is required.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from odradek.broker.dispatch import RequestContext, handles
from odradek.cluster.features import UpgradeType, check_update, finalized_levels, level_name
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.update_features import UpdateFeaturesRequest, UpdateFeaturesResponse
from odradek.security.acl import Operation

log = logging.getLogger(__name__)


class _Validated(Exception):
    """Raised by a validate-only change once it passed its checks: nothing is written."""


@handles(ApiKey.UPDATE_FEATURES, versions=(0, 2))
async def update_features(ctx: RequestContext, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    R = UpdateFeaturesResponse
    names = [u.feature for u in request.feature_updates]

    def answer(code: ErrorCode, message: str | None) -> UpdateFeaturesResponse:
        results = (
            [R.UpdatableFeatureResult(feature=n, error_code=0, error_message=None) for n in names]
            if ctx.version < 2 else []
        )
        return R(throttle_time_ms=0, error_code=int(code), error_message=message, results=results)

    if not ctx.authorize_cluster(Operation.ALTER):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if len(set(names)) != len(names):
        return answer(ErrorCode.INVALID_REQUEST, "The request contains multiple updates of the same feature.")
    updates: list[tuple[str, int, UpgradeType]] = []
    for u in request.feature_updates:
        if ctx.version == 0:
            kind = UpgradeType.SAFE_DOWNGRADE if u.allow_downgrade else UpgradeType.UPGRADE
        else:
            kind = UpgradeType(u.upgrade_type) if u.upgrade_type in UpgradeType._value2member_map_ else UpgradeType.UNKNOWN
        updates.append((u.feature, max(u.max_version_level, 0), kind))
    validate_only = ctx.version >= 1 and request.validate_only
    changed: list[tuple[str, int, int]] = []

    def change(stored: Mapping[str, int] | None) -> Mapping[str, int] | None:
        current = finalized_levels(stored)
        after = dict(current)
        changed.clear()
        for name, level, kind in updates:
            check_update(current, name, level, kind)
            if level != current.get(name, 0):
                changed.append((name, current.get(name, 0), level))
            after[name] = level
        if validate_only:
            raise _Validated
        if not changed and stored is not None:
            return stored
        return {name: level for name, level in after.items() if level > 0}

    try:
        _levels, epoch = await ctx.ports.features.features.update_features(change)
    except _Validated:
        return answer(ErrorCode.NONE, None)
    except KafkaError as exc:
        log.warning("UpdateFeatures from %s refused: %s", ctx.session.principal_name, exc.message or exc.code.name)
        return answer(exc.code, exc.message or None)
    for name, before, after in changed:
        log.info(
            "finalized feature %s changed from %s to %s (epoch %d) by %s", name, level_name(name, before),
            level_name(name, after), epoch, ctx.session.principal_name,
        )
    return answer(ErrorCode.NONE, None)
