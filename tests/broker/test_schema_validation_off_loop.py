"""Broker-side schema validation of a large batch runs off the event loop: while its records are
read, other clients are answered; its answer names the refused record; the broker's registry
view is read locally."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import odradek.broker.schema_validation as validation_module
from odradek.errors import ErrorCode
from odradek.records import BatchBuilder
from odradek.testing import produce_request
from tests.broker.inprocess import hosted, running_broker
from tests.broker.test_off_loop_conversions import (  # noqa: F401  (threads: a fixture)
    BASE_TS,
    BIG,
    _held_while_others_answered,
    _Hold,
    _jobs_in,
    _request_in_thread,
    _until,
    threads,
)

RECORDS = 20_000
SCHEMA = {"type": "record", "name": "Big", "fields": [{"name": "n", "type": "long"}]}


def _register(url: str, subject: str) -> int | None:
    req = urllib.request.Request(
        f"{url}/subjects/{subject}/versions", data=json.dumps({"schema": json.dumps(SCHEMA)}).encode(),
        method="POST", headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(json.loads(resp.read())["id"])
    except (urllib.error.HTTPError, urllib.error.URLError):
        return None  # the registry is still starting: asked again


def _batch(schema_id: int, unframed: int | None = None) -> bytes:
    b = BatchBuilder()
    good = b"\x00" + schema_id.to_bytes(4, "big") + b"\x02"
    for i in range(RECORDS):
        b.append(BASE_TS + i, None, b"\x02" if i == unframed else good)
    return b.build()


def test_a_large_batch_is_validated_off_the_loop(
    tmp_path: Path, threads: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    async def body() -> None:
        async with running_broker(tmp_path / "data", overrides={"schema.registry.listeners": "http://127.0.0.1:0"}) as broker:
            assert broker.schema_registry is not None
            url = broker.schema_registry.url
            ids: list[int | None] = [None]

            async def registered() -> bool:
                ids[0] = await asyncio.to_thread(_register, url, "big-value")
                return ids[0] is not None

            for _ in range(300):
                if await registered():
                    break
                await asyncio.sleep(0.1)
            schema_id = ids[0]
            assert schema_id is not None
            await broker.topics.create("big", 1, 1, {**BIG, "confluent.value.schema.validation": "true"})
            await broker.topics.create("live", 1, 1, {})
            p = await hosted(broker, "big")
            await hosted(broker, "live")
            _jobs_in(broker, threads)
            hold = _Hold(validation_module.check_framing, threading.current_thread(), lambda data, *a: len(data) > 100_000)
            monkeypatch.setattr(validation_module, "check_framing", hold)

            port = broker.bound["PLAINTEXT"][1]
            heavy = _request_in_thread(port, produce_request("big", _batch(schema_id, unframed=12_345)), 9)
            try:
                await _held_while_others_answered(broker, hold, heavy)
            finally:
                hold.release.set()
            resp = (await heavy).responses[0].partition_responses[0]
            assert resp.error_code == ErrorCode.INVALID_RECORD
            assert [e.batch_index for e in resp.record_errors] == [12_345]
            assert p.log.log_end_offset == 0

            good = await _request_in_thread(port, produce_request("big", _batch(schema_id)), 9)
            assert good.responses[0].partition_responses[0].error_code == 0
            await _until(lambda: p.log.log_end_offset == RECORDS, "the good batch appended")

    asyncio.run(body())
