"""Topic and broker configs: describe, alter, incrementally alter."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from odradek.client.admin._base import (
    _TYPE_NAMES,
    AdminBase,
    _check,
    _Pending,
    _source,
)
from odradek.client.admin.types import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSynonym,
    _config_text,
)
from odradek.config import ConfigSource
from odradek.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from odradek.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from odradek.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from odradek.transport import AsyncBrokerConnection


class ConfigAdmin(AdminBase):
    """:class:`AsyncAdmin`'s config operations: ``describe_configs``, ``alter_configs``,
    ``incremental_alter_configs`` on topics, brokers and broker loggers."""

    @staticmethod
    def _config_target(resource: ConfigResource) -> int | None:
        """The broker a resource's configs are asked of: the broker itself, else any broker."""
        if resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and resource.name.isdigit():
            return int(resource.name)
        return None

    def _by_target(self, resources: Iterable[ConfigResource]) -> dict[int | None, list[ConfigResource]]:
        groups: dict[int | None, list[ConfigResource]] = {}
        for r in resources:
            groups.setdefault(self._config_target(r), []).append(r)
        return groups

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        keys: Iterable[str] | None = None,
        include_synonyms: bool = True,
        include_documentation: bool = False,
        timeout: float | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource (only ``keys`` when given), with its value, source,
        read-only flag and synonyms (where the value comes from, in order of precedence)."""
        dl = self._deadline(timeout)
        wanted = list(dict.fromkeys(resources))
        state: _Pending[ConfigResource, dict[str, ConfigEntry]] = _Pending(
            {r: None for r in wanted}, lambda r: f"describe configs of {r}"
        )
        key_list = None if keys is None else list(keys)
        Q = DescribeConfigsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[ConfigResource]) -> None:
            v = conn.version_for(Q)
            req = Q(
                resources=[Q.DescribeConfigsResource(resource_type=int(r.type), resource_name=r.name, configuration_keys=key_list) for r in batch],
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
            resp: DescribeConfigsResponse = await self._request(conn, req, v, dl)
            state.unanswered(batch, {ConfigResource(res.resource_type, res.resource_name) for res in resp.results})
            for res in resp.results:
                key = ConfigResource(res.resource_type, res.resource_name)
                if key not in state.todo:
                    continue
                if res.error_code:
                    state.fail(key, res.error_code, res.error_message)
                    continue
                entries = {}
                for c in res.configs:
                    if v == 0:
                        source = ConfigSource.DEFAULT_CONFIG if c.is_default else (
                            ConfigSource.DYNAMIC_TOPIC_CONFIG if key.type == ConfigResourceType.TOPIC else ConfigSource.STATIC_BROKER_CONFIG
                        )
                    else:
                        source = _source(c.config_source)
                    entries[c.name] = ConfigEntry(
                        c.name,
                        c.value,
                        source,
                        c.read_only,
                        c.is_sensitive,
                        [ConfigSynonym(s.name, s.value, _source(s.source)) for s in (c.synonyms or [])],
                        _TYPE_NAMES.get(c.config_type) if v >= 3 else None,
                        c.documentation if v >= 3 else None,
                    )
                state.done(key, entries)

        async def attempt() -> None:
            await self._per_node(state, self._by_target(state.todo), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {r: state.results[r] for r in wanted}

    async def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, Any]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Replace each resource's whole set of overrides by ``configs`` (AlterConfigs): names
        left out go back to their defaults.  Prefer :meth:`incremental_alter_configs`."""
        dl = self._deadline(timeout)
        state: _Pending[ConfigResource, None] = _Pending(dict(configs), lambda r: f"alter configs of {r}")
        Q = AlterConfigsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[ConfigResource]) -> None:
            v = conn.version_for(Q)
            req = Q(
                resources=[
                    Q.AlterConfigsResource(
                        resource_type=int(r.type),
                        resource_name=r.name,
                        configs=[Q.AlterableConfig(name=k, value=_config_text(val)) for k, val in state.todo[r].items()],
                    )
                    for r in batch
                ],
                validate_only=validate_only,
            )
            resp: AlterConfigsResponse = await self._request(conn, req, v, dl)
            self._altered(state, batch, resp.responses)

        async def attempt() -> None:
            await self._per_node(state, self._by_target(state.todo), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp] | Mapping[str, Any]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Change configs one by one: ``{ConfigResource("topic", "t"): [AlterConfigOp("retention.ms",
        "1000"), AlterConfigOp.delete("segment.ms")]}``.  A mapping ``{name: value}`` is
        shorthand for SET (and DELETE where the value is None)."""
        dl = self._deadline(timeout)
        ops: dict[ConfigResource, list[AlterConfigOp]] = {}
        for resource, change in changes.items():
            if isinstance(change, Mapping):
                ops[resource] = [
                    AlterConfigOp.delete(k) if val is None else AlterConfigOp.set(k, val) for k, val in change.items()
                ]
            else:
                ops[resource] = list(change)
        state: _Pending[ConfigResource, None] = _Pending(ops, lambda r: f"alter configs of {r}")
        Q = IncrementalAlterConfigsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[ConfigResource]) -> None:
            v = conn.version_for(Q)
            req = Q(
                resources=[
                    Q.AlterConfigsResource(
                        resource_type=int(r.type),
                        resource_name=r.name,
                        configs=[
                            Q.AlterableConfig(name=op.name, config_operation=int(op.op), value=op.value)
                            for op in state.todo[r]
                        ],
                    )
                    for r in batch
                ],
                validate_only=validate_only,
            )
            resp: IncrementalAlterConfigsResponse = await self._request(conn, req, v, dl)
            self._altered(state, batch, resp.responses)

        async def attempt() -> None:
            await self._per_node(state, self._by_target(state.todo), send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    @staticmethod
    def _altered(state: _Pending[ConfigResource, None], batch: list[ConfigResource], responses: Sequence[Any]) -> None:
        state.unanswered(batch, {ConfigResource(res.resource_type, res.resource_name) for res in responses})
        for res in responses:
            key = ConfigResource(res.resource_type, res.resource_name)
            if key not in state.todo:
                continue
            if res.error_code:
                state.fail(key, res.error_code, res.error_message)
            else:
                state.done(key, None)
