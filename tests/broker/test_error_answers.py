"""A handler that raises answers the client with Kafka's per-item error shape and keeps the
connection open, for every API the broker serves whose response has no top-level error code at
some version (Kafka's getErrorResponse), at each such version."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.dispatch import HANDLERS
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import (
    NEED_DATA,
    ApiKey,
    ClientConnection,
    ResponseReceived,
    request_class,
    response_class,
)
from odradek.protocol._schema import INT16, Struct
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from tests.broker.inprocess import running_broker
from tests.protocol._named import in_versions, named

#: items answered with the error for a request naming two of everything (two topics of two
#: partitions each, two groups, two resources...), as Kafka's getErrorResponse answers them
ANSWERED: dict[int, Callable[[int], int]] = {
    ApiKey.PRODUCE: lambda v: 4,  # topic x partition
    ApiKey.FETCH: lambda v: 4,  # v0-6: topic x partition
    ApiKey.LIST_OFFSETS: lambda v: 4,
    ApiKey.METADATA: lambda v: 2,  # topics
    ApiKey.OFFSET_COMMIT: lambda v: 4,
    ApiKey.OFFSET_FETCH: lambda v: 4 if v < 2 else 2,  # v0-1 partitions, v8+ groups
    ApiKey.FIND_COORDINATOR: lambda v: 2,  # v4+: coordinator keys
    ApiKey.DESCRIBE_GROUPS: lambda v: 2,
    ApiKey.CREATE_TOPICS: lambda v: 2,
    ApiKey.DELETE_TOPICS: lambda v: 2,
    ApiKey.DELETE_RECORDS: lambda v: 4,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: lambda v: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: lambda v: 4,  # v0-3
    ApiKey.WRITE_TXN_MARKERS: lambda v: 8,  # marker x topic x partition
    ApiKey.TXN_OFFSET_COMMIT: lambda v: 4,
    ApiKey.CREATE_ACLS: lambda v: 2,  # one result per creation
    ApiKey.DELETE_ACLS: lambda v: 2,  # one result per filter
    ApiKey.DESCRIBE_CONFIGS: lambda v: 2,  # resources
    ApiKey.ALTER_CONFIGS: lambda v: 2,
    ApiKey.DESCRIBE_LOG_DIRS: lambda v: 0,  # v0-2 cannot say: Kafka answers no log dirs either
    ApiKey.ALTER_REPLICA_LOG_DIRS: lambda v: 8,  # dir x topic x partition
    ApiKey.CREATE_PARTITIONS: lambda v: 2,
    ApiKey.DELETE_GROUPS: lambda v: 2,
    ApiKey.ELECT_LEADERS: lambda v: 4,  # v0: topic x partition
    ApiKey.INCREMENTAL_ALTER_CONFIGS: lambda v: 2,
    ApiKey.ALTER_CLIENT_QUOTAS: lambda v: 2,  # entries
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: lambda v: 4,  # deletions + upsertions
    ApiKey.DESCRIBE_PRODUCERS: lambda v: 4,
    ApiKey.DESCRIBE_TRANSACTIONS: lambda v: 2,
    ApiKey.CONSUMER_GROUP_DESCRIBE: lambda v: 2,  # groups (KIP-848)
    ApiKey.SHARE_GROUP_DESCRIBE: lambda v: 2,  # groups (KIP-932)
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: lambda v: 2,  # topics (KIP-966)
    # the share coordinator's RPCs (KIP-932): topic x partition
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: lambda v: 4,
    ApiKey.READ_SHARE_GROUP_STATE: lambda v: 4,
    ApiKey.WRITE_SHARE_GROUP_STATE: lambda v: 4,
    ApiKey.DELETE_SHARE_GROUP_STATE: lambda v: 4,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: lambda v: 4,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: lambda v: 2,  # groups (KIP-932's admin side)
}


def _has_top_error(api: int, version: int) -> bool:
    return any(f.attr == "error_code" and in_versions(version, f.versions) for f in response_class(api)._fields_)


def _versions_without_top_error(api: int) -> list[int]:
    entry = HANDLERS[api]
    return [v for v in range(entry.min_version, entry.max_version + 1) if not _has_top_error(api, v)]


APIS = sorted(api for api in HANDLERS if _versions_without_top_error(api))


def test_every_such_api_has_an_expected_answer() -> None:
    assert {ApiKey(a) for a in APIS} == set(ANSWERED)


def _errors(obj: Any, version: int) -> list[int]:
    found = []
    for f in type(obj)._fields_:
        if not in_versions(version, f.versions):
            continue
        value = getattr(obj, f.attr)
        if f.type is INT16 and f.attr.endswith("error_code"):
            found.append(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, Struct):
                    found += _errors(item, version)
        elif isinstance(value, Struct):
            found += _errors(value, version)
    return found


class _Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = ClientConnection(client_id="error-answers")

    async def request(self, message: Any, version: int) -> Any:
        self.writer.write(self.conn.send_request(message, version)[1])
        while True:
            ev = self.conn.next_event()
            if isinstance(ev, ResponseReceived):
                return ev.response
            assert ev is NEED_DATA, ev
            data = await asyncio.wait_for(self.reader.read(1 << 20), 30)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.conn.receive_data(data)


def _raiser(exc: Exception, waits: bool) -> Callable[[Any, Any], Any]:
    if not waits:

        def handler(ctx: Any, request: Any) -> Any:
            raise exc

        return handler

    async def waiting(ctx: Any, request: Any) -> Any:
        await asyncio.sleep(0)  # raised after the handler waited (the connection's task path)
        raise exc

    return waiting


@pytest.mark.parametrize("api", APIS, ids=[ApiKey(a).name for a in APIS])
def test_a_handler_error_is_answered_per_item_and_the_connection_stays_open(
    api: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            client = _Client(*await asyncio.open_connection(*broker.bound["PLAINTEXT"]))
            try:
                for version in _versions_without_top_error(api):
                    request = named(request_class(api), version)
                    if api == ApiKey.PRODUCE:
                        request.acks = -1
                    cases = [
                        (KafkaError(ErrorCode.POLICY_VIOLATION, "refused by the test"), False, ErrorCode.POLICY_VIOLATION),
                        (RuntimeError("a bug in the handler"), True, ErrorCode.UNKNOWN_SERVER_ERROR),
                    ]
                    for exc, waits, code in cases:
                        entry = dataclasses.replace(HANDLERS[api], handler=_raiser(exc, waits), sync=not waits)
                        monkeypatch.setitem(HANDLERS, api, entry)
                        resp = await client.request(request, version)
                        errors = _errors(resp, version)
                        assert errors.count(code) == ANSWERED[ApiKey(api)](version), (version, resp)
                        assert set(errors) <= {code, 0}, (version, resp)
                    # the connection goes on
                    assert (await client.request(ApiVersionsRequest(), 0)).error_code == 0
            finally:
                client.writer.close()

    asyncio.run(body())


def test_produce_with_acks_0_is_not_answered_and_its_connection_closes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's answer to a failed acks=0 produce: none; the connection closes so that the producer
    notices (it reads no responses)."""

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            entry = dataclasses.replace(HANDLERS[ApiKey.PRODUCE], handler=_raiser(KafkaError(ErrorCode.POLICY_VIOLATION), False))
            monkeypatch.setitem(HANDLERS, ApiKey.PRODUCE, entry)
            client = _Client(*await asyncio.open_connection(*broker.bound["PLAINTEXT"]))
            request = named(request_class(ApiKey.PRODUCE), 9)
            request.acks = 0
            client.writer.write(client.conn.send_request(request, 9, expect_response=False)[1])
            assert await asyncio.wait_for(client.reader.read(100), 30) == b""
            client.writer.close()

    asyncio.run(body())


# real clients see the error, not a disconnect


def _forced(api: int, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = dataclasses.replace(
        HANDLERS[api], handler=_raiser(KafkaError(ErrorCode.POLICY_VIOLATION, "refused by the test"), False), sync=True
    )
    monkeypatch.setitem(HANDLERS, api, entry)


def test_confluent_kafka_sees_a_create_topics_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    def create(bootstrap: str) -> Any:
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
        future = admin.create_topics([NewTopic("refused", 1, 1)], operation_timeout=5, request_timeout=10)["refused"]
        try:
            future.result(timeout=20)
        except ck.KafkaException as exc:
            return exc.args[0]
        return None

    async def body() -> None:
        async with running_broker(tmp_path / "data") as broker:
            _forced(ApiKey.CREATE_TOPICS, monkeypatch)
            host, port = broker.bound["PLAINTEXT"]
            error = await asyncio.to_thread(create, f"{host}:{port}")
            assert error is not None and error.code() == ErrorCode.POLICY_VIOLATION, error

    asyncio.run(body())


def test_confluent_kafka_producer_sees_a_produce_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = pytest.importorskip("confluent_kafka")

    def produce(bootstrap: str) -> Any:
        producer = ck.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 8000, "enable.idempotence": False})
        reports: list[Any] = []
        producer.produce("answers", b"v", on_delivery=lambda err, _msg: reports.append(err))
        producer.flush(20)
        return reports

    async def body() -> None:
        async with running_broker(tmp_path / "data", overrides={"auto.create.topics.enable": True}) as broker:
            await broker.topics.create("answers", 1, 1, {})
            _forced(ApiKey.PRODUCE, monkeypatch)
            host, port = broker.bound["PLAINTEXT"]
            reports = await asyncio.to_thread(produce, f"{host}:{port}")
            assert len(reports) == 1 and reports[0] is not None
            assert reports[0].code() == ErrorCode.POLICY_VIOLATION, reports[0]

    asyncio.run(body())
