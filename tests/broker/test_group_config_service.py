"""The typed read side of group configs (odradek.broker.group_configs.GroupConfigs) on the embedded
metadata store: ``for_group`` follows every change at once, a refused change stores nothing, and the
overrides are read back by a new backend on the same directory (a restart)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from odradek.broker.group_configs import GroupConfigs
from odradek.cluster.group_configs import AutoOffsetReset
from odradek.cluster.metadata import BrokerInfo
from odradek.config import BrokerConfig, ConfigError
from odradek.coordination.embedded import EmbeddedBackend
from odradek.errors import ErrorCode, KafkaError
from odradek.settings import LiveSettings


def _backend(path: Path) -> EmbeddedBackend:
    backend = EmbeddedBackend(path, "c1", on_disk=lambda: {})
    asyncio.run(backend.start(BrokerInfo(0, ())))
    return backend


def test_for_group_follows_changes_and_survives_a_restart(tmp_path: Path) -> None:
    live = LiveSettings(BrokerConfig(overrides={"group.share.record.lock.duration.ms": "20000"}))
    configs = GroupConfigs(_backend(tmp_path), live)
    before = configs.for_group("workers")
    assert before.share_record_lock_duration_ms == 20000  # the broker's setting
    assert before.share_auto_offset_reset == AutoOffsetReset("latest")

    async def change() -> None:
        await configs.alter("workers", {"share.auto.offset.reset": "by_duration:PT10M",
                                        "share.isolation.level": "read_committed"},
                            replace_all=False, validate_only=False)

    asyncio.run(change())
    after = configs.for_group("workers")
    assert after.share_auto_offset_reset == AutoOffsetReset("by_duration", 600_000)
    assert after.share_read_committed
    assert configs.for_group("others") == configs.for_group("others")  # untouched groups: defaults
    assert not configs.for_group("others").share_read_committed

    with pytest.raises(ConfigError):  # refused: nothing stored
        asyncio.run(configs.alter("workers", {"share.isolation.level": None, "share.delivery.count.limit": "99"},
                                  replace_all=False, validate_only=False))
    assert configs.for_group("workers").share_read_committed

    asyncio.run(configs.alter("workers", {"share.isolation.level": None}, replace_all=False, validate_only=False))
    assert not configs.for_group("workers").share_read_committed
    assert dict(configs.overrides("workers")) == {"share.auto.offset.reset": "by_duration:PT10M"}

    again = GroupConfigs(_backend(tmp_path), live)  # a restart: the image file read back
    assert again.for_group("workers").share_auto_offset_reset.duration_ms == 600_000
    assert again.groups() == ["workers"]


def test_an_empty_group_id_is_invalid_request(tmp_path: Path) -> None:
    configs = GroupConfigs(_backend(tmp_path), LiveSettings(BrokerConfig()))
    with pytest.raises(KafkaError) as info:
        asyncio.run(configs.alter("", {"share.isolation.level": "read_committed"}, replace_all=False,
                                  validate_only=False))
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_share_settings_that_disagree_stop_the_start(tmp_path: Path) -> None:
    live = LiveSettings(BrokerConfig(overrides={"group.share.record.lock.duration.ms": "70000"}))
    with pytest.raises(ConfigError, match=re.escape("group.share.max.record.lock.duration.ms must be greater than")):
        GroupConfigs(_backend(tmp_path), live)
