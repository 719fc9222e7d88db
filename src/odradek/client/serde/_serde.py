"""The serializers and deserializers: one class per format and face (blocking, asyncio).

A serializer resolves, once per topic, the schema id it writes with (register, look up, or the
subject's latest version, as configured) and keeps it with the parsed writer schema; after that a
record costs only the encoding.  A deserializer resolves, once per schema id, the writer schema
(and the reader schema it resolves to) and keeps both.  Resolution is a plan (see
:mod:`._registry`) that the blocking face runs with blocking HTTP and the asyncio face awaits.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Mapping
from typing import Any

from odradek._clock import Clock, SystemClock
from odradek.client._config import ClientConfigError
from odradek.client.serde._registry import (
    AsyncSchemaRegistryClient,
    Plan,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    _Registry,
)
from odradek.client.serde._wire import (
    STRATEGIES,
    SchemaRegistryError,
    SerializationError,
    SubjectNameStrategy,
    decode_message_indexes,
    encode_message_indexes,
    frame_header,
    read_header,
    topic_name_strategy,
)

__all__ = [
    "AsyncAvroDeserializer",
    "AsyncAvroSerializer",
    "AsyncJSONDeserializer",
    "AsyncJSONSerializer",
    "AsyncProtobufDeserializer",
    "AsyncProtobufSerializer",
    "AvroDeserializer",
    "AvroSerializer",
    "JSONDeserializer",
    "JSONSerializer",
    "ProtobufDeserializer",
    "ProtobufSerializer",
]

_SERIALIZER_CONF = {"auto.register.schemas": True, "normalize.schemas": False, "use.latest.version": False,
                    "use.schema.id": None, "subject.name.strategy": topic_name_strategy,
                    "latest.cache.ttl.secs": -1}
_DESERIALIZER_CONF = {"use.latest.version": False, "subject.name.strategy": topic_name_strategy,
                      "latest.cache.ttl.secs": -1}


class _Expiry:
    """``latest.cache.ttl.secs``: how long a subject's latest version, once asked, is used (-1:
    for the life of the serializer, Confluent's default)."""

    def __init__(self, conf: Mapping[str, Any], clock: Clock | None) -> None:
        ttl = conf["latest.cache.ttl.secs"]
        if not isinstance(ttl, (int, float)) or isinstance(ttl, bool):
            raise ClientConfigError(f"latest.cache.ttl.secs must be a number, not {ttl!r}")
        #: whether cached states expire at all (only the latest version's do)
        self.active = bool(conf["use.latest.version"]) and ttl >= 0
        self._ttl_ms = int(ttl * 1000)
        self._clock = clock or SystemClock()
        self._until: dict[Any, int] = {}

    def start(self, key: Any) -> None:
        if self.active:
            self._until[key] = self._clock.monotonic_ms() + self._ttl_ms

    def expired(self, key: Any) -> bool:
        return self._clock.monotonic_ms() >= self._until.get(key, 0)


def _conf(given: Mapping[str, Any] | None, defaults: Mapping[str, Any], what: str) -> dict[str, Any]:
    conf = dict(defaults)
    for k, v in (given or {}).items():
        if k not in defaults:
            raise ClientConfigError(f"unknown {what} config {k!r}: known are {sorted(defaults)}")
        conf[k] = v
    strategy = conf.get("subject.name.strategy")
    if isinstance(strategy, str):
        if strategy.rpartition(".")[2] not in STRATEGIES:
            raise ClientConfigError(f"unknown subject.name.strategy {strategy!r}: known are {sorted(STRATEGIES)}")
        conf["subject.name.strategy"] = STRATEGIES[strategy.rpartition(".")[2]]
    elif strategy is not None and not callable(strategy):
        raise ClientConfigError("subject.name.strategy must be a strategy's name or a callable")
    return conf


def _registry_error(exc: SchemaRegistryError, doing: str) -> SerializationError:
    if exc.error_code == 40403 or (exc.http_status == 404 and "schema" in exc.message.lower()):
        return SerializationError(f"{doing}: the schema id is not known to the registry ({exc})")
    return SerializationError(f"{doing}: {exc}")


# -- the resolution shared by every serializer ----------------------------------------------------


class _SerializerBase:
    """What every serializer shares: configuration, subject and the per-topic state
    ``(header, writer)`` (the bytes before a payload, the format's parsed writer schema)."""

    _schema_type = "AVRO"
    _extra_conf: Mapping[str, Any] = {}

    def __init__(self, client: _Registry, conf: Mapping[str, Any] | None, is_key: bool,
                 clock: Clock | None = None) -> None:
        self._client = client
        self._conf = _conf(conf, {**_SERIALIZER_CONF, **self._extra_conf}, type(self).__name__)
        self._strategy: SubjectNameStrategy = self._conf["subject.name.strategy"]
        self.is_key = is_key
        #: topic -> (header, writer): what the first record of a topic resolved
        self._states: dict[str, tuple[bytes, Any]] = {}
        self._expiry = _Expiry(self._conf, clock)

    @property
    def record_name(self) -> str | None:
        """The name subject strategies other than TopicNameStrategy use."""
        raise NotImplementedError

    def _own_schema(self) -> Plan[Schema]:
        raise NotImplementedError
        yield  # a generator

    def _own_writer(self) -> Any:
        raise NotImplementedError

    def _writer_from(self, schema: Schema) -> Plan[Any]:
        """The writer for a schema the registry gave (``use.latest.version``, ``use.schema.id``)."""
        raise NotImplementedError
        yield

    def _header_extra(self) -> bytes:
        return b""

    def _encode(self, state: tuple[bytes, Any], value: Any) -> bytes:
        raise NotImplementedError

    def _resolve(self, topic: str) -> Plan[tuple[bytes, Any]]:
        subject = self._strategy(topic, self.is_key, self.record_name)
        client = self._client
        conf = self._conf
        normalize = bool(conf["normalize.schemas"])
        try:
            if conf["use.schema.id"] is not None:
                sid = int(conf["use.schema.id"])
                writer = yield from self._writer_from((yield from client._get_schema(sid)))
            elif conf["use.latest.version"]:
                latest = yield from client._version(subject, "latest")
                sid = latest.schema_id
                writer = yield from self._writer_from(latest.schema)
            else:
                schema = yield from self._own_schema()
                if conf["auto.register.schemas"]:
                    sid = (yield from client._register(subject, schema, normalize)).schema_id
                else:
                    sid = (yield from client._lookup(subject, schema, normalize)).schema_id
                writer = self._own_writer()
        except SchemaRegistryError as exc:
            raise _registry_error(exc, f"finding the schema of subject {subject!r}") from exc
        except SerializationError:
            raise
        except Exception as exc:  # a registry schema the format's library does not take
            raise SerializationError(f"the schema of subject {subject!r} cannot be used: "
                                     f"{type(exc).__name__}: {exc}") from exc
        state = (frame_header(sid) + self._header_extra(), writer)
        self._states[topic] = state
        self._expiry.start(topic)
        return state

    def _serialize(self, state: tuple[bytes, Any], topic: str, value: Any) -> bytes:
        try:
            return self._encode(state, value)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"a value for {topic} does not fit its {self._schema_type} schema: "
                                     f"{type(exc).__name__}: {exc}") from exc


class _SyncSerializer(_SerializerBase):
    _client: SchemaRegistryClient

    def serialize(self, topic: str, value: Any) -> bytes | None:
        """``value`` framed for ``topic`` (None stays None): what Odradek's producer calls when
        this serializer is its ``key.serializer`` / ``value.serializer``.  Raises
        :class:`SerializationError`."""
        if value is None:
            return None
        state = self._states.get(topic)
        if state is None or (self._expiry.active and self._expiry.expired(topic)):
            state = self._client._run(self._resolve(topic))
        return self._serialize(state, topic, value)


class _AsyncSerializer(_SerializerBase):
    _client: AsyncSchemaRegistryClient

    async def serialize(self, topic: str, value: Any) -> bytes | None:
        """``value`` framed for ``topic`` (None stays None); only the first record of a topic
        awaits the registry.  Raises :class:`SerializationError`."""
        if value is None:
            return None
        state = self._states.get(topic)
        if state is None or (self._expiry.active and self._expiry.expired(topic)):
            state = await self._client._run(self._resolve(topic))
        return self._serialize(state, topic, value)


class _DeserializerBase:
    """What every deserializer shares: per schema id (and topic, with ``use.latest.version``) the
    decoding state, from the writer schema the id names."""

    _schema_type = "AVRO"
    _extra_conf: Mapping[str, Any] = {}

    def __init__(self, client: _Registry, conf: Mapping[str, Any] | None, is_key: bool,
                 clock: Clock | None = None) -> None:
        self._client = client
        self._conf = _conf(conf, {**_DESERIALIZER_CONF, **self._extra_conf}, type(self).__name__)
        self._strategy: SubjectNameStrategy = self._conf["subject.name.strategy"]
        self._use_latest = bool(self._conf["use.latest.version"])
        self.is_key = is_key
        self._states: dict[Any, Any] = {}
        self._expiry = _Expiry(self._conf, clock)

    def _parse(self, schema: Schema) -> Plan[Any]:
        raise NotImplementedError
        yield

    def _name_of(self, parsed: Any) -> str | None:
        return None

    def _state(self, writer: Any, reader: Any) -> Any:
        raise NotImplementedError

    def _own_reader(self) -> Any:
        return None

    def _decode(self, state: Any, data: bytes) -> Any:
        raise NotImplementedError

    def _resolve(self, topic: str, schema_id: int) -> Plan[Any]:
        client = self._client
        try:
            schema = yield from client._get_schema(schema_id)
        except SchemaRegistryError as exc:
            raise _registry_error(exc, f"reading a record of {topic} framed with schema id {schema_id}") from exc
        if schema.schema_type != self._schema_type:
            raise SerializationError(f"schema id {schema_id} is a {schema.schema_type} schema, not {self._schema_type}")
        try:
            writer = yield from self._parse(schema)
            reader = self._own_reader()
            if self._use_latest:
                subject = self._strategy(topic, self.is_key, self._name_of(writer))
                latest = yield from client._version(subject, "latest")
                reader = yield from self._parse(latest.schema)
            state = self._state(writer, reader)
        except SerializationError:
            raise
        except SchemaRegistryError as exc:
            raise _registry_error(exc, f"resolving the reader schema of {topic}") from exc
        except Exception as exc:
            raise SerializationError(f"schema id {schema_id} cannot be used: {type(exc).__name__}: {exc}") from exc
        key = (topic, schema_id) if self._use_latest else schema_id
        self._states[key] = state
        self._expiry.start(key)
        return state

    def _deserialize(self, state: Any, schema_id: int, data: bytes) -> Any:
        try:
            return self._decode(state, data)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"the {self._schema_type} payload framed with schema id {schema_id} "
                                     f"does not decode: {type(exc).__name__}: {exc}") from exc


class _SyncDeserializer(_DeserializerBase):
    _client: SchemaRegistryClient

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        """The value framed in ``data`` (None stays None): what Odradek's consumers call when this
        deserializer is their ``key.deserializer`` / ``value.deserializer``.  Raises
        :class:`SerializationError` for bytes that are not framed, an unknown schema id or a
        payload that does not decode."""
        if data is None:
            return None
        sid = read_header(data)
        key = (topic, sid) if self._use_latest else sid
        state = self._states.get(key)
        if state is None or (self._expiry.active and self._expiry.expired(key)):
            state = self._client._run(self._resolve(topic, sid))
        return self._deserialize(state, sid, data)


class _AsyncDeserializer(_DeserializerBase):
    _client: AsyncSchemaRegistryClient

    async def deserialize(self, topic: str, data: bytes | None) -> Any:
        """The value framed in ``data`` (None stays None); only a new schema id awaits the
        registry.  Raises :class:`SerializationError`."""
        if data is None:
            return None
        sid = read_header(data)
        key = (topic, sid) if self._use_latest else sid
        state = self._states.get(key)
        if state is None or (self._expiry.active and self._expiry.expired(key)):
            state = await self._client._run(self._resolve(topic, sid))
        return self._deserialize(state, sid, data)


def _sync_client(client: SchemaRegistryClient | str | Mapping[str, Any]) -> SchemaRegistryClient:
    if isinstance(client, AsyncSchemaRegistryClient):
        raise TypeError("a blocking serializer needs a SchemaRegistryClient, not an AsyncSchemaRegistryClient")
    return client if isinstance(client, SchemaRegistryClient) else SchemaRegistryClient(client)


def _async_client(client: AsyncSchemaRegistryClient | str | Mapping[str, Any]) -> AsyncSchemaRegistryClient:
    if isinstance(client, SchemaRegistryClient):
        raise TypeError("an asyncio serializer needs an AsyncSchemaRegistryClient, not a SchemaRegistryClient")
    return client if isinstance(client, AsyncSchemaRegistryClient) else AsyncSchemaRegistryClient(client)


# -- Avro -----------------------------------------------------------------------------------------


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError as exc:  # pragma: no cover - the registry extra
        raise ImportError("Avro serializers need fastavro: pip install 'odradek[registry]'") from exc
    return fastavro


def _avro_parse(client: _Registry, schema: Schema) -> Plan[Any]:
    """A registry schema parsed by fastavro, its references fetched and parsed first."""
    fastavro = _fastavro()
    named: dict[str, Any] = {}

    def refs(s: Schema, depth: int) -> Plan[None]:
        if depth > 32:
            raise SerializationError("schema references nest deeper than 32")
        for ref in s.references:
            reg = yield from client._version(ref.subject, ref.version)
            yield from refs(reg.schema, depth + 1)
            fastavro.parse_schema(json.loads(reg.schema.schema_str), named_schemas=named)

    yield from refs(schema, 0)
    return fastavro.parse_schema(json.loads(schema.schema_str), named_schemas=named)


def _avro_name(parsed: Any) -> str | None:
    if isinstance(parsed, dict):
        name = parsed.get("name")
        return str(name) if name is not None else str(parsed.get("type"))
    return parsed if isinstance(parsed, str) else None


class _AvroWriting(_SerializerBase):
    _write: Callable[..., Any]
    def _init_avro(self, schema_str: str | Mapping[str, Any] | None,
                   to_dict: Callable[[Any], Any] | None) -> None:
        self._to_dict = to_dict
        self._parsed: Any = None
        self._schema: Schema | None = None
        if schema_str is None:
            if self._conf["use.schema.id"] is None and not self._conf["use.latest.version"]:
                raise ClientConfigError("an Avro serializer needs a schema, or use.latest.version / use.schema.id")
            self._name: str | None = None
            return
        text = schema_str if isinstance(schema_str, str) else json.dumps(schema_str)
        try:
            self._parsed = _fastavro().parse_schema(json.loads(text))
        except Exception as exc:
            raise SerializationError(f"the Avro schema does not parse: {exc}") from exc
        self._schema = Schema(text, "AVRO")
        self._name = _avro_name(self._parsed)

    @property
    def record_name(self) -> str | None:
        """The Avro schema's full name (``namespace.name``; a primitive's type), for RecordNameStrategy subjects."""
        return self._name

    def _own_schema(self) -> Plan[Schema]:
        assert self._schema is not None
        return self._schema
        yield

    def _own_writer(self) -> Any:
        return self._parsed

    def _writer_from(self, schema: Schema) -> Plan[Any]:
        if schema.schema_type != "AVRO":
            raise SerializationError(f"the registry's schema is {schema.schema_type}, not AVRO")
        return (yield from _avro_parse(self._client, schema))

    def _encode(self, state: tuple[bytes, Any], value: Any) -> bytes:
        header, parsed = state
        if self._to_dict is not None:
            value = self._to_dict(value)
        buf = io.BytesIO()
        buf.write(header)
        self._write(buf, parsed, value)
        return buf.getvalue()


class AvroSerializer(_AvroWriting, _SyncSerializer):
    """Avro values (dicts, or anything ``to_dict`` turns into one) written with fastavro's
    schemaless writer and framed with the registry id of ``schema_str`` under the topic's subject.

    ``AvroSerializer(client, schema_str, conf=None, is_key=False, to_dict=None)``; ``client`` a
    :class:`SchemaRegistryClient` or its URL.  ``conf`` takes confluent-kafka's names:
    ``auto.register.schemas`` (default true: register the schema; false: look it up, a schema not
    registered is a :class:`SerializationError`), ``normalize.schemas``, ``use.latest.version``
    (write with the subject's latest schema instead), ``use.schema.id`` (write with that id's
    schema), ``latest.cache.ttl.secs`` (how long the latest version is used before it is asked
    again; -1, the default: for the serializer's life), ``subject.name.strategy``
    (``TopicNameStrategy`` default, ``RecordNameStrategy``, ``TopicRecordNameStrategy``, or a
    callable ``(topic, is_key, record_name) -> subject``).  ``clock``: the time that TTL is read on
    (:mod:`odradek._clock`; tests give a ``FakeClock``).

    Give it to Odradek's producer as ``value.serializer`` (or ``key.serializer`` with
    ``is_key=True``): the producer calls ``serialize(topic, value)``.
    """

    def __init__(self, client: SchemaRegistryClient | str | Mapping[str, Any],
                 schema_str: str | Mapping[str, Any] | None = None, conf: Mapping[str, Any] | None = None, *,
                 is_key: bool = False, to_dict: Callable[[Any], Any] | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(_sync_client(client), conf, is_key, clock)
        self._init_avro(schema_str, to_dict)
        self._write = _fastavro().schemaless_writer


class AsyncAvroSerializer(_AvroWriting, _AsyncSerializer):
    """The asyncio twin of :class:`AvroSerializer`: ``await serializer.serialize(topic, value)``;
    ``client`` an :class:`AsyncSchemaRegistryClient` or its URL."""

    def __init__(self, client: AsyncSchemaRegistryClient | str | Mapping[str, Any],
                 schema_str: str | Mapping[str, Any] | None = None, conf: Mapping[str, Any] | None = None, *,
                 is_key: bool = False, to_dict: Callable[[Any], Any] | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(_async_client(client), conf, is_key, clock)
        self._init_avro(schema_str, to_dict)
        self._write = _fastavro().schemaless_writer


class _AvroReading(_DeserializerBase):
    def _init_avro(self, schema_str: str | Mapping[str, Any] | None,
                   from_dict: Callable[[Any], Any] | None) -> None:
        self._from_dict = from_dict
        self._reader: Any = None
        if schema_str is not None:
            text = schema_str if isinstance(schema_str, str) else json.dumps(schema_str)
            try:
                self._reader = _fastavro().parse_schema(json.loads(text))
            except Exception as exc:
                raise SerializationError(f"the Avro reader schema does not parse: {exc}") from exc
        self._read = _fastavro().schemaless_reader

    def _parse(self, schema: Schema) -> Plan[Any]:
        return (yield from _avro_parse(self._client, schema))

    def _name_of(self, parsed: Any) -> str | None:
        return _avro_name(parsed)

    def _own_reader(self) -> Any:
        return self._reader

    def _state(self, writer: Any, reader: Any) -> Any:
        if reader is not None:
            from fastavro.schema import to_parsing_canonical_form

            if to_parsing_canonical_form(reader) == to_parsing_canonical_form(writer):
                reader = None
            else:
                # fastavro finds a writer it cannot resolve only while reading; ask Avro's rules now
                self._check_resolution(writer, reader)
        return (writer, reader)

    @staticmethod
    def _check_resolution(writer: Any, reader: Any) -> None:
        from odradek.schemas import AVRO, SchemaError, parse_schema

        def clean(s: Any) -> str:
            return json.dumps(s, default=str)

        try:
            r, w = parse_schema(AVRO, clean(_strip(reader)), new=False), parse_schema(AVRO, clean(_strip(writer)), new=False)
        except SchemaError:
            return  # let fastavro decide
        problems = r.incompatibilities(w)
        if problems:
            raise SerializationError("the writer schema cannot be read with the reader schema: "
                                     + "; ".join(p.render("reader", "writer") for p in problems[:3]))

    def _decode(self, state: Any, data: bytes) -> Any:
        writer, reader = state
        buf = io.BytesIO(data)
        buf.seek(5)
        value = self._read(buf, writer, reader)
        return value if self._from_dict is None else self._from_dict(value)


def _strip(parsed: Any) -> Any:
    """A fastavro-parsed schema without fastavro's own keys (``__fastavro_parsed`` ...)."""
    if isinstance(parsed, dict):
        return {k: _strip(v) for k, v in parsed.items() if not k.startswith("__")}
    if isinstance(parsed, list):
        return [_strip(v) for v in parsed]
    return parsed


class AvroDeserializer(_AvroReading, _SyncDeserializer):
    """Avro values read from registry-framed bytes: the writer schema is the one the frame's id
    names (fetched once per id); with ``schema_str`` (or ``use.latest.version``: the subject's
    latest schema) the record is resolved to that reader schema by Avro's rules (fields added with
    defaults filled in, removed fields dropped, promotions), so data written with older versions
    reads as the newest.  ``conf``: ``use.latest.version``, ``latest.cache.ttl.secs``,
    ``subject.name.strategy``, as :class:`AvroSerializer`.

    ``AvroDeserializer(client, schema_str=None, conf=None, is_key=False, from_dict=None)``.  Give it
    to Odradek's consumers as ``value.deserializer`` (``key.deserializer`` with ``is_key=True``).
    """

    def __init__(self, client: SchemaRegistryClient | str | Mapping[str, Any],
                 schema_str: str | Mapping[str, Any] | None = None, conf: Mapping[str, Any] | None = None, *,
                 is_key: bool = False, from_dict: Callable[[Any], Any] | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(_sync_client(client), conf, is_key, clock)
        self._init_avro(schema_str, from_dict)


class AsyncAvroDeserializer(_AvroReading, _AsyncDeserializer):
    """The asyncio twin of :class:`AvroDeserializer`: ``await deserializer.deserialize(topic, data)``."""

    def __init__(self, client: AsyncSchemaRegistryClient | str | Mapping[str, Any],
                 schema_str: str | Mapping[str, Any] | None = None, conf: Mapping[str, Any] | None = None, *,
                 is_key: bool = False, from_dict: Callable[[Any], Any] | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(_async_client(client), conf, is_key, clock)
        self._init_avro(schema_str, from_dict)


# -- JSON Schema -------------------------------------------------------------------------------


def _json_validator(client: _Registry, schema: Schema) -> Plan[Any]:
    """A jsonschema validator for a registry schema, its references in its ``referencing`` registry."""
    from jsonschema.validators import validator_for
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    resources: list[tuple[str, Any]] = []

    def refs(s: Schema, depth: int) -> Plan[None]:
        if depth > 32:
            raise SerializationError("schema references nest deeper than 32")
        for ref in s.references:
            reg = yield from client._version(ref.subject, ref.version)
            yield from refs(reg.schema, depth + 1)
            contents = json.loads(reg.schema.schema_str)
            resources.append((ref.name, Resource.from_contents(contents, default_specification=DRAFT7)))

    yield from refs(schema, 0)
    contents = json.loads(schema.schema_str)
    return _validator(contents, Registry().with_resources(resources) if resources else None, validator_for)


def _validator(contents: Any, registry: Any, validator_for: Any) -> Any:
    cls = validator_for(contents)
    cls.check_schema(contents)
    return cls(contents, registry=registry) if registry is not None else cls(contents)


def _json_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class _JsonWriting(_SerializerBase):
    _schema_type = "JSON"
    _extra_conf = {"validate": True}

    def _init_json(self, schema_str: str | Mapping[str, Any] | None, to_dict: Callable[[Any], Any] | None) -> None:
        from jsonschema.validators import validator_for

        self._to_dict = to_dict
        self._schema: Schema | None = None
        self._validator: Any = None
        self._name: str | None = None
        if schema_str is None:
            if self._conf["use.schema.id"] is None and not self._conf["use.latest.version"]:
                raise ClientConfigError("a JSON serializer needs a schema, or use.latest.version / use.schema.id")
            return
        text = schema_str if isinstance(schema_str, str) else json.dumps(schema_str)
        try:
            contents = json.loads(text)
            self._validator = _validator(contents, None, validator_for)
        except Exception as exc:
            raise SerializationError(f"the JSON schema does not parse: {exc}") from exc
        self._schema = Schema(text, "JSON")
        self._name = contents.get("title") if isinstance(contents, dict) else None

    @property
    def record_name(self) -> str | None:
        """The JSON schema's ``title``, for RecordNameStrategy subjects (None without one)."""
        return self._name

    def _own_schema(self) -> Plan[Schema]:
        assert self._schema is not None
        return self._schema
        yield

    def _own_writer(self) -> Any:
        return self._validator

    def _writer_from(self, schema: Schema) -> Plan[Any]:
        if schema.schema_type != "JSON":
            raise SerializationError(f"the registry's schema is {schema.schema_type}, not JSON")
        return (yield from _json_validator(self._client, schema))

    def _encode(self, state: tuple[bytes, Any], value: Any) -> bytes:
        header, validator = state
        if self._to_dict is not None:
            value = self._to_dict(value)
        if self._conf["validate"]:
            error = _first_error(validator, value)
            if error is not None:
                raise SerializationError(f"the value does not validate against its JSON schema: {error}")
        return header + _json_dumps(value)


def _first_error(validator: Any, value: Any) -> str | None:
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(value))
    return None if error is None else str(error.message)


class JSONSerializer(_JsonWriting, _SyncSerializer):
    """JSON values validated against a JSON Schema (as confluent-kafka's ``JSONSerializer`` does,
    with ``jsonschema``) and written as compact UTF-8 JSON framed with the schema's registry id.

    ``JSONSerializer(schema_str, client, conf=None, is_key=False, to_dict=None)`` (confluent-kafka's
    argument order).  ``conf``: as :class:`AvroSerializer`, plus ``validate`` (default true).  The
    record name for the record strategies is the schema's ``title``.
    """

    def __init__(self, schema_str: str | Mapping[str, Any] | None,
                 client: SchemaRegistryClient | str | Mapping[str, Any], conf: Mapping[str, Any] | None = None, *,
                 is_key: bool = False, to_dict: Callable[[Any], Any] | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(_sync_client(client), conf, is_key, clock)
        self._init_json(schema_str, to_dict)


class AsyncJSONSerializer(_JsonWriting, _AsyncSerializer):
    """The asyncio twin of :class:`JSONSerializer`."""

    def __init__(self, schema_str: str | Mapping[str, Any] | None,
                 client: AsyncSchemaRegistryClient | str | Mapping[str, Any], conf: Mapping[str, Any] | None = None,
                 *, is_key: bool = False, to_dict: Callable[[Any], Any] | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(_async_client(client), conf, is_key, clock)
        self._init_json(schema_str, to_dict)


class _JsonReading(_DeserializerBase):
    _schema_type = "JSON"
    _extra_conf = {"validate": True}

    def _init_json(self, schema_str: str | Mapping[str, Any] | None, from_dict: Callable[[Any], Any] | None) -> None:
        from jsonschema.validators import validator_for

        self._from_dict = from_dict
        self._reader: Any = None
        if schema_str is not None:
            text = schema_str if isinstance(schema_str, str) else json.dumps(schema_str)
            try:
                self._reader = _validator(json.loads(text), None, validator_for)
            except Exception as exc:
                raise SerializationError(f"the JSON reader schema does not parse: {exc}") from exc

    def _parse(self, schema: Schema) -> Plan[Any]:
        return (yield from _json_validator(self._client, schema))

    def _name_of(self, parsed: Any) -> str | None:
        schema = getattr(parsed, "schema", None)
        return schema.get("title") if isinstance(schema, dict) else None

    def _own_reader(self) -> Any:
        return self._reader

    def _state(self, writer: Any, reader: Any) -> Any:
        return reader if reader is not None else writer

    def _decode(self, state: Any, data: bytes) -> Any:
        value = json.loads(memoryview(data)[5:].tobytes())
        if self._conf["validate"]:
            error = _first_error(state, value)
            if error is not None:
                raise SerializationError(f"the value does not validate against its JSON schema: {error}")
        return value if self._from_dict is None else self._from_dict(value)


class JSONDeserializer(_JsonReading, _SyncDeserializer):
    """JSON values read from registry-framed bytes and validated (``validate``, default true)
    against ``schema_str``, or when it is None the writer schema the frame's id names (or with
    ``use.latest.version`` the subject's latest).

    ``JSONDeserializer(schema_str, client, conf=None, is_key=False, from_dict=None)``.
    """

    def __init__(self, schema_str: str | Mapping[str, Any] | None,
                 client: SchemaRegistryClient | str | Mapping[str, Any], conf: Mapping[str, Any] | None = None, *,
                 is_key: bool = False, from_dict: Callable[[Any], Any] | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(_sync_client(client), conf, is_key, clock)
        self._init_json(schema_str, from_dict)


class AsyncJSONDeserializer(_JsonReading, _AsyncDeserializer):
    """The asyncio twin of :class:`JSONDeserializer`."""

    def __init__(self, schema_str: str | Mapping[str, Any] | None,
                 client: AsyncSchemaRegistryClient | str | Mapping[str, Any], conf: Mapping[str, Any] | None = None,
                 *, is_key: bool = False, from_dict: Callable[[Any], Any] | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(_async_client(client), conf, is_key, clock)
        self._init_json(schema_str, from_dict)


# -- Protobuf --------------------------------------------------------------------------------------


def _index_array(desc: Any) -> list[int]:
    """Where a message is in its file: the index of each enclosing message from the top."""
    path = []
    current = desc
    while current.containing_type is not None:
        parent = current.containing_type
        path.append(list(parent.nested_types).index(current))
        current = parent
    path.append(list(current.file.message_types_by_name).index(current.name))
    return path[::-1]


def _builtin(name: str) -> bool:
    return name.startswith(("confluent/", "google/protobuf/", "google/type/"))


class _ProtobufWriting(_SerializerBase):
    _schema_type = "PROTOBUF"
    _extra_conf = {"skip.known.types": True}

    def _init_protobuf(self, message_type: Any) -> None:
        desc = getattr(message_type, "DESCRIPTOR", None)
        if desc is None or not hasattr(desc, "file"):
            raise ClientConfigError("a Protobuf serializer needs a message class (one protoc generated)")
        self._message_type = message_type
        self._name = str(desc.full_name)
        self._indexes = encode_message_indexes(_index_array(desc))

    @property
    def record_name(self) -> str | None:
        """The Protobuf message's full name (``package.Message``), for RecordNameStrategy subjects."""
        return self._name

    def _file_schema(self, fd: Any) -> Plan[Schema]:
        """The schema of a .proto file as confluent-kafka registers it (the base64 of its
        ``FileDescriptorProto``), its imports registered first under their file names."""
        refs = []
        normalize = bool(self._conf["normalize.schemas"])
        for dep in fd.dependencies:
            if self._conf["skip.known.types"] and _builtin(dep.name):
                continue
            schema = yield from self._file_schema(dep)
            if self._conf["auto.register.schemas"]:
                yield from self._client._register(dep.name, schema, normalize)
            reg = yield from self._client._lookup(dep.name, schema, normalize)
            refs.append(SchemaReference(dep.name, dep.name, int(reg.version or 0)))
        return Schema(base64.standard_b64encode(fd.serialized_pb).decode("ascii"), "PROTOBUF", tuple(refs))

    def _own_schema(self) -> Plan[Schema]:
        return (yield from self._file_schema(self._message_type.DESCRIPTOR.file))

    def _own_writer(self) -> Any:
        return self._message_type

    def _writer_from(self, schema: Schema) -> Plan[Any]:
        if schema.schema_type != "PROTOBUF":
            raise SerializationError(f"the registry's schema is {schema.schema_type}, not PROTOBUF")
        return self._message_type
        yield

    def _header_extra(self) -> bytes:
        return self._indexes

    def _encode(self, state: tuple[bytes, Any], value: Any) -> bytes:
        header, message_type = state
        if not isinstance(value, message_type):
            raise SerializationError(f"the serializer writes {self._name}, not {type(value).__name__}")
        return header + value.SerializeToString()


class ProtobufSerializer(_ProtobufWriting, _SyncSerializer):
    """Protobuf messages of one class framed the Confluent way: the schema id, then the
    message-index array (where the message is in its ``.proto`` file), then the message.  The
    schema registered is the class's file descriptor (base64, as confluent-kafka registers it), its
    imports registered first under their file names (``skip.known.types``, default true, leaves
    out ``google/protobuf/...``).

    ``ProtobufSerializer(message_type, client, conf=None, is_key=False)`` (confluent-kafka's order).
    """

    def __init__(self, message_type: Any, client: SchemaRegistryClient | str | Mapping[str, Any],
                 conf: Mapping[str, Any] | None = None, *, is_key: bool = False,
                 clock: Clock | None = None) -> None:
        super().__init__(_sync_client(client), conf, is_key, clock)
        self._init_protobuf(message_type)


class AsyncProtobufSerializer(_ProtobufWriting, _AsyncSerializer):
    """The asyncio twin of :class:`ProtobufSerializer`."""

    def __init__(self, message_type: Any, client: AsyncSchemaRegistryClient | str | Mapping[str, Any],
                 conf: Mapping[str, Any] | None = None, *, is_key: bool = False,
                 clock: Clock | None = None) -> None:
        super().__init__(_async_client(client), conf, is_key, clock)
        self._init_protobuf(message_type)


class _ProtobufReading(_DeserializerBase):
    _schema_type = "PROTOBUF"

    def _init_protobuf(self, message_type: Any) -> None:
        if getattr(message_type, "DESCRIPTOR", None) is None:
            raise ClientConfigError("a Protobuf deserializer needs a message class (one protoc generated)")
        self._message_type = message_type

    def _parse(self, schema: Schema) -> Plan[Any]:
        return self._message_type
        yield

    def _state(self, writer: Any, reader: Any) -> Any:
        return self._message_type

    def _decode(self, state: Any, data: bytes) -> Any:
        _, pos = decode_message_indexes(data)
        return state.FromString(memoryview(data)[pos:].tobytes())


class ProtobufDeserializer(_ProtobufReading, _SyncDeserializer):
    """Protobuf messages of ``message_type`` read from registry-framed bytes: the frame's id must
    name a Protobuf schema the registry knows; the message-index array is read and skipped, the
    message parsed with the class (Protobuf's own rules read older and newer writers).

    ``ProtobufDeserializer(message_type, client, conf=None, is_key=False)``.
    """

    def __init__(self, message_type: Any, client: SchemaRegistryClient | str | Mapping[str, Any],
                 conf: Mapping[str, Any] | None = None, *, is_key: bool = False,
                 clock: Clock | None = None) -> None:
        super().__init__(_sync_client(client), conf, is_key, clock)
        self._init_protobuf(message_type)


class AsyncProtobufDeserializer(_ProtobufReading, _AsyncDeserializer):
    """The asyncio twin of :class:`ProtobufDeserializer`."""

    def __init__(self, message_type: Any, client: AsyncSchemaRegistryClient | str | Mapping[str, Any],
                 conf: Mapping[str, Any] | None = None, *, is_key: bool = False,
                 clock: Clock | None = None) -> None:
        super().__init__(_async_client(client), conf, is_key, clock)
        self._init_protobuf(message_type)

