"""Feature flags (KIP-584): the cluster's finalized levels and what a broker supports, and
changing a finalized level (Kafka's Admin ``describeFeatures`` / ``updateFeatures``).

Describing asks a broker ApiVersions (v3+), as Kafka's Admin does; an update is sent to any
broker (a Kafka 4 broker forwards it to the controller; an Odradek broker writes it itself)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from odradek.client.admin._base import AdminBase
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from odradek.protocol.messages.update_features import UpdateFeaturesRequest, UpdateFeaturesResponse

__all__ = ["SAFE_DOWNGRADE", "UNSAFE_DOWNGRADE", "UPGRADE", "FeatureAdmin", "FeatureMetadata"]

#: UpdateFeatures' upgrade types
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@dataclass(frozen=True)
class FeatureMetadata:
    """What describe_features returns: finalized levels (features at level 0 are absent), their
    epoch, and the ranges the broker asked supports."""

    finalized: Mapping[str, int]
    epoch: int
    supported: Mapping[str, tuple[int, int]]


class FeatureAdmin(AdminBase):
    """:class:`AsyncAdmin`'s feature-flag operations (KIP-584): ``describe_features``, ``update_features``."""

    async def describe_features(self, *, timeout: float | None = None) -> FeatureMetadata:
        """The cluster's feature flags (``metadata.version``, ``kraft.version``, ...): the finalized levels,
        their epoch and the ranges the broker asked supports (ApiVersions v3+); KafkaError
        UNSUPPORTED_VERSION from an older broker."""
        dl = self._deadline(timeout)
        conn = await self._node(None, dl)
        version = conn.version_for(ApiVersionsRequest)
        if version < 3:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker does not report features (ApiVersions < v3)")
        req = ApiVersionsRequest(client_software_name="odradek", client_software_version="0.1.0")
        resp: ApiVersionsResponse = await self._request(conn, req, version, dl)
        if resp.error_code:
            raise KafkaError(resp.error_code, "ApiVersions failed")
        return FeatureMetadata(
            finalized={f.name: f.max_version_level for f in resp.finalized_features},
            epoch=resp.finalized_features_epoch,
            supported={f.name: (f.min_version, f.max_version) for f in resp.supported_features},
        )

    async def update_features(
        self, updates: Mapping[str, tuple[int, int]], *, validate_only: bool = False, timeout: float | None = None
    ) -> None:
        """Set finalized levels: ``{feature: (level, upgrade type)}`` (:data:`UPGRADE`,
        :data:`SAFE_DOWNGRADE`, :data:`UNSAFE_DOWNGRADE`; level 0 disables the feature).  A
        refusal raises KafkaError with the broker's message (INVALID_UPDATE_VERSION...)."""
        if not updates:
            raise ValueError("no feature to update")
        dl = self._deadline(timeout)
        R = UpdateFeaturesRequest
        req = R(
            timeout_ms=dl.remaining_ms(),
            feature_updates=[
                R.FeatureUpdateKey(feature=name, max_version_level=level, upgrade_type=kind)
                for name, (level, kind) in updates.items()
            ],
            validate_only=validate_only,
        )
        conn = await self._node(None, dl)
        version = conn.version_for(UpdateFeaturesRequest)
        if version == 0 and (validate_only or any(kind == UNSAFE_DOWNGRADE for _l, kind in updates.values())):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker's UpdateFeatures v0 has no such option")
        if version == 0:
            for u in req.feature_updates:
                u.allow_downgrade, u.upgrade_type = u.upgrade_type != UPGRADE, UPGRADE
        resp: UpdateFeaturesResponse = await self._request(conn, req, version, dl)
        if resp.error_code:
            raise KafkaError(resp.error_code, resp.error_message or "UpdateFeatures failed")
        for r in resp.results:
            if r.error_code:
                raise KafkaError(r.error_code, r.error_message or f"feature {r.feature}")
