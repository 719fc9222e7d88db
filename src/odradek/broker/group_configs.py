"""The group configs (resource type GROUP) as the broker keeps and serves them.

Overrides live in the cluster's metadata store (``MetadataImage.group_configs``: the embedded
backend's image file on a single node, ``/config/groups/<group>`` in ZooKeeper with a
``/config/changes`` notification, so every broker follows a change), whether the group exists or
not, and survive restarts.  :meth:`GroupConfigs.for_group` is the typed read side the group and
share-group code calls (:class:`odradek.cluster.group_configs.GroupConfig`: the overrides, else
the broker's ``group.*`` settings now); :meth:`GroupConfigs.alter` is the write side the config
handlers call, checked by :func:`odradek.cluster.group_configs.validate` against the stored
overrides as they are at that moment.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from odradek.cluster.group_configs import GroupConfig, check_share_settings, resolve, validate
from odradek.coordination import MetadataBackend
from odradek.errors import ErrorCode, KafkaError
from odradek.settings import LiveSettings

__all__ = ["GroupConfigs"]

log = logging.getLogger(__name__)


class GroupConfigs:
    """Every group's configs: read typed (:meth:`for_group`), listed as set (:meth:`overrides`),
    changed (:meth:`alter`)."""

    def __init__(self, backend: MetadataBackend, settings: LiveSettings) -> None:
        check_share_settings(settings.current.share_groups)  # at start-up, as Kafka (ConfigError)
        self._backend = backend
        self._settings = settings
        self._cache: dict[str, GroupConfig] = {}
        self._cache_key: tuple[object, object] | None = None

    def overrides(self, group_id: str) -> Mapping[str, str]:
        """The group's configs as set (none: it has no override)."""
        return self._backend.image.group_configs.get(group_id, {})

    def groups(self) -> list[str]:
        """The groups that have configs set."""
        return sorted(self._backend.image.group_configs)

    def for_group(self, group_id: str) -> GroupConfig:
        """The group's configs in effect now (its overrides, else the broker's defaults).  Cheap:
        remembered until the metadata image's group configs or the settings change."""
        stored = self._backend.image.group_configs
        current = self._settings.current
        key = (stored, current)
        if self._cache_key is None or self._cache_key[0] is not stored or self._cache_key[1] is not current:
            self._cache.clear()
            self._cache_key = key
        found = self._cache.get(group_id)
        if found is None:
            found = resolve(group_id, stored.get(group_id, {}), current.groups, current.share_groups)
            if len(self._cache) < 10_000:
                self._cache[group_id] = found
        return found

    async def alter(
        self, group_id: str, change: Mapping[str, str | None], *, replace_all: bool, validate_only: bool
    ) -> Mapping[str, str]:
        """Apply ``change`` (name -> value; None deletes the override, back to the default) to the
        group's overrides as the store holds them (``replace_all``: the change is the whole new
        set, AlterConfigs), checked first: INVALID_CONFIG with Kafka's message and nothing stored.
        ``validate_only`` checks and stores nothing.  Returns the overrides now."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        current = self._settings.current

        def apply(before: dict[str, str]) -> dict[str, str]:
            after = {} if replace_all else dict(before)
            for name, value in change.items():
                if value is None:
                    after.pop(name, None)
                else:
                    after[name] = value.strip()
            validate(after, current.groups, current.share_groups)
            return before if validate_only else after

        after = await self._backend.alter_group_configs(group_id, apply)
        if not validate_only:
            log.info("group %r configs: %s", group_id, dict(sorted(after.items())) or "none (defaults)")
        return after
