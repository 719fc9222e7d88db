"""The embedded metadata store's writes: the file is exactly the image's JSON however it was built
(per-topic texts cached and re-encoded only when a topic changes), concurrent changes each see the
one before (no lost update, no second topic of one name), and a change is published only once it
is on disk."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from odradek.cluster.metadata import BrokerInfo
from odradek.coordination.embedded import FILE_NAME, FORMAT_VERSION, EmbeddedBackend
from odradek.errors import ErrorCode, KafkaError


def _started(tmp_path: Path) -> EmbeddedBackend:
    backend = EmbeddedBackend(tmp_path, "c1", on_disk=lambda: {})
    asyncio.run(backend.start(BrokerInfo(0, ())))
    return backend


def _on_disk(backend: EmbeddedBackend) -> str:
    return (backend.path.parent / FILE_NAME).read_text()


def _expected(backend: EmbeddedBackend) -> str:
    """The image's JSON with the file's format version, as the store writes it."""
    return json.dumps({**backend.image.to_json(), "format_version": FORMAT_VERSION}, sort_keys=True)


def test_the_file_is_the_images_json_through_every_kind_of_change(tmp_path: Path) -> None:
    backend = _started(tmp_path)

    async def changes() -> None:
        for i in range(5):
            await backend.create_topic(f"t{i}", 2, 1, {"retention.ms": str(i)})
            assert _on_disk(backend) == _expected(backend)
        await backend.set_topic_configs("t1", {"cleanup.policy": "compact"})  # a cached topic changes
        await backend.create_partitions("t2", 4)
        await backend.delete_topic("t3")  # gone from the list, recorded as deleted
        await backend.set_broker_configs({"log.retention.ms": "5"})

    asyncio.run(changes())
    text = _on_disk(backend)
    assert text == _expected(backend)
    data = json.loads(text)
    topics = {t["name"]: t for t in data["topics"]}
    assert sorted(topics) == ["t0", "t1", "t2", "t4"]
    assert topics["t1"]["configs"] == {"cleanup.policy": "compact"} and len(topics["t2"]["partitions"]) == 4
    assert [d["name"] for d in data["deleted_topics"]] == ["t3"]
    # and it reads back as the same image
    again = _started(tmp_path)
    assert {n: (t.topic_id, t.partition_count, dict(t.configs)) for n, t in again.image.topics.items()} == {
        n: (t.topic_id, t.partition_count, dict(t.configs)) for n, t in backend.image.topics.items()
    }


def test_concurrent_changes_each_see_the_one_before(tmp_path: Path) -> None:
    backend = _started(tmp_path)

    async def race() -> list[object]:
        creations = [backend.create_topic(f"many-{i}", 1, 1, {}) for i in range(30)]
        same = [backend.create_topic("same", 1, 1, {"n": str(i)}) for i in range(5)]
        return list(await asyncio.gather(*creations, *same, return_exceptions=True))

    results = asyncio.run(race())
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 4 and all(
        isinstance(r, KafkaError) and r.code == ErrorCode.TOPIC_ALREADY_EXISTS for r in refused
    ), refused
    created_same = [r for r in results[30:] if not isinstance(r, BaseException)]
    assert len(created_same) == 1 and backend.image.topics["same"].topic_id == created_same[0].topic_id  # type: ignore[attr-defined]
    stored = {t["name"] for t in json.loads(_on_disk(backend))["topics"]}
    assert stored == {f"many-{i}" for i in range(30)} | {"same"}


def test_a_failed_write_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _started(tmp_path)
    published: list[object] = []
    backend.add_listener(published.append)
    before = _on_disk(backend)

    def full(_text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(backend, "_write", full)
    with pytest.raises(OSError):
        asyncio.run(backend.create_topic("nope", 1, 1, {}))
    assert "nope" not in backend.image.topics and _on_disk(backend) == before and published == []
