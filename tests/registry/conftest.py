"""A broker with its schema registry for the registry's tests, and a small HTTP helper."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from odradek.testing import BrokerProcess

MEDIA = "application/vnd.schemaregistry.v1+json"


@dataclass
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str]

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def code(self) -> int | None:
        try:
            return int(self.json.get("error_code"))
        except (ValueError, AttributeError, TypeError):
            return None


def call(method: str, url: str, body: Any = None, *, headers: Mapping[str, str] | None = None,
         raw: bytes | None = None, auth: tuple[str, str] | None = None, timeout: float = 30) -> Answer:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    h = {"Content-Type": MEDIA, "Accept": MEDIA} if data is not None else {"Accept": MEDIA}
    if auth is not None:
        h["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    h.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Answer(resp.status, resp.read(), dict(resp.headers))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(), dict(exc.headers))


def unique(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("registry") / "data",
        overrides={"schema.registry.listeners": "http://127.0.0.1:0", "metrics.port": 0,
                   "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1},
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def url(registry_broker: BrokerProcess) -> str:
    assert registry_broker.registry_url is not None
    return registry_broker.registry_url


def avro_user(*extra_fields: dict[str, Any], name: str = "User") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "acme",
                       "fields": [{"name": "name", "type": "string"}, *extra_fields]})


def data_dir(broker: BrokerProcess) -> Path:
    return broker.data_dir
