"""Client quotas (KIP-546): describe and alter them (DescribeClientQuotas, AlterClientQuotas).

An entity is a mapping of entity type (``"user"``, ``"client-id"``, ``"ip"``) to a name, None
meaning the default entity (``<default>``): ``{"user": "alice"}``, ``{"user": None,
"client-id": "app"}``.  Quotas are ``producer_byte_rate``, ``consumer_byte_rate``,
``request_percentage``, ``controller_mutation_rate`` (users and client ids) and
``connection_creation_rate`` (IPs)::

    await admin.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1048576})])
    await admin.describe_client_quotas({"user": "alice"})
    # {ClientQuotaEntity(user='alice'): {'producer_byte_rate': 1048576.0}}

A value of None in an alteration removes that quota.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from odradek.client.admin._base import AdminBase
from odradek.client.admin.types import AdminError
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from odradek.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

__all__ = ["SPECIFIED", "ClientQuotaEntity", "QuotaAdmin"]


class _Specified:
    def __repr__(self) -> str:
        return "SPECIFIED"


#: in a describe filter: any entity of that type that is not the default one (MATCH_SPECIFIED)
SPECIFIED = _Specified()

_ORDER = ("user", "client-id", "ip")


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """A quota entity: ``(entity type, name)`` pairs, a None name for the default entity."""

    parts: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, entity: Mapping[str, str | None] | ClientQuotaEntity) -> ClientQuotaEntity:
        """The entity for ``{"user": "alice", "client-id": None}`` (None: the default entity of that type),
        its parts in Kafka's order; an entity is returned as is."""
        if isinstance(entity, ClientQuotaEntity):
            return entity
        rank = {k: i for i, k in enumerate(_ORDER)}
        return cls(tuple(sorted(entity.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))))

    def as_dict(self) -> dict[str, str | None]:
        """The entity as ``{entity type: name or None}``."""
        return dict(self.parts)

    def get(self, entity_type: str, default: str | None = None) -> str | None:
        """The name given for ``entity_type`` (``user``, ``client-id``, ``ip``), None for the default entity,
        ``default`` when the entity has no part of that type."""
        return dict(self.parts).get(entity_type, default)

    def __str__(self) -> str:
        return ", ".join(f"{k}={'<default>' if v is None else v}" for k, v in self.parts)

    def __repr__(self) -> str:
        return (
            "ClientQuotaEntity("
            + ", ".join(
                f"{k.replace('-', '_')}={'<default>' if v is None else repr(v)}" for k, v in self.parts
            )
            + ")"
        )


class QuotaAdmin(AdminBase):
    """:class:`AsyncAdmin`'s client-quota operations (KIP-546): ``describe_client_quotas``, ``alter_client_quotas``."""

    async def describe_client_quotas(
        self,
        components: Mapping[str, str | _Specified | None] | None = None,
        *,
        strict: bool = False,
        timeout: float | None = None,
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The quotas of the entities matching ``components``: entity type -> a name (that
        entity), None (the default entity) or :data:`SPECIFIED` (any non-default one).  Not
        strict, entities with other types too match (``{"user": "alice"}`` also gives alice's
        (user, client id) entities); None or empty: every entity."""
        dl = self._deadline(timeout)
        R = DescribeClientQuotasRequest
        comps = []
        for kind, match in (components or {}).items():
            if match is SPECIFIED:
                comps.append(R.ComponentData(entity_type=kind, match_type=2, match=None))
            elif match is None:
                comps.append(R.ComponentData(entity_type=kind, match_type=1, match=None))
            else:
                comps.append(R.ComponentData(entity_type=kind, match_type=0, match=str(match)))
        conn = await self._node(None, dl)
        resp: DescribeClientQuotasResponse = await self._request(
            conn, R(components=comps, strict=strict), 0, dl
        )
        if resp.error_code:
            raise KafkaError(resp.error_code, resp.error_message or "describing client quotas")
        out: dict[ClientQuotaEntity, dict[str, float]] = {}
        for e in resp.entries or []:
            entity = ClientQuotaEntity.of({d.entity_type: d.entity_name for d in e.entity})
            out[entity] = {v.key: float(v.value) for v in e.values}
        return out

    async def alter_client_quotas(
        self,
        alterations: Iterable[
            tuple[Mapping[str, str | None] | ClientQuotaEntity, Mapping[str, float | None]]
        ],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Set (a number) or remove (None) quotas of each entity; entities the broker refuses raise
        :class:`~odradek.client.admin.types.AdminError` (by entity), the others are changed."""
        dl = self._deadline(timeout)
        R = AlterClientQuotasRequest
        items = [(ClientQuotaEntity.of(e), dict(ops)) for e, ops in alterations]
        entries = [
            R.EntryData(
                entity=[R.EntityData(entity_type=k, entity_name=v) for k, v in entity.parts],
                ops=[
                    R.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                    for k, v in ops.items()
                ],
            )
            for entity, ops in items
        ]
        conn = await self._node(None, dl)
        resp: AlterClientQuotasResponse = await self._request(
            conn, R(entries=entries, validate_only=validate_only), 0, dl
        )
        errors: dict[ClientQuotaEntity, KafkaError] = {}
        results: dict[ClientQuotaEntity, None] = {}
        for (entity, _ops), r in zip(items, resp.entries, strict=False):
            if r.error_code:
                errors[entity] = KafkaError(
                    r.error_code, r.error_message or f"altering the quotas of {entity}"
                )
            else:
                results[entity] = None
        if len(resp.entries) != len(items):
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker did not answer every quota entity")
        if errors:
            if len(items) == 1:
                raise next(iter(errors.values()))
            raise AdminError(errors, results)
