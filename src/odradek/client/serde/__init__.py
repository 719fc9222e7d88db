"""Serializers and deserializers for registry-framed data: Avro, JSON Schema and Protobuf values
written and read in Confluent's wire format (a 0 magic byte, the schema id as 4 big-endian bytes,
then the payload; Protobuf puts its message-index array before the message), with their schemas
in a Confluent-compatible schema registry (Odradek's own, ``schema.registry.listeners``, or
Confluent's).  Records they write are read by confluent-kafka's deserializers and the other way
round.

Blocking (for :class:`odradek.client.Producer` / :class:`~odradek.client.Consumer`, which call
``serialize(topic, value)`` / ``deserialize(topic, data)`` on their ``key.serializer``,
``value.serializer``, ``key.deserializer`` and ``value.deserializer``)::

    registry = SchemaRegistryClient("http://127.0.0.1:8081")
    producer = Producer(bootstrap_servers="127.0.0.1:9092",
                        value_serializer=AvroSerializer(registry, schema_str))
    consumer = Consumer(bootstrap_servers=..., group_id="g",
                        value_deserializer=AvroDeserializer(registry, reader_schema_str))

asyncio: the ``Async*`` classes over an :class:`AsyncSchemaRegistryClient` have
``await serialize(topic, value)`` / ``await deserialize(topic, data)``.
:class:`~odradek.client.AsyncProducer` awaits them when they are its ``key.serializer`` /
``value.serializer``, :class:`~odradek.client.AsyncConsumer` (and the blocking
:class:`~odradek.client.Consumer`, on its own loop) when they are its deserializers; a record
that does not deserialize is not consumed (the records before it are returned, then its error is
raised with the position back at it).  They can also be called directly::

    await producer.send(topic, await serializer.serialize(topic, order))

The schema cache: a serializer asks the registry once per topic (register, look up, or the
subject's latest version: ``auto.register.schemas``, ``use.latest.version``, ``use.schema.id``
as confluent-kafka names them) and a deserializer once per schema id; a registry client keeps
schemas by id and ids by (subject, schema) for its life.  Subjects come from
``subject.name.strategy``: :func:`topic_name_strategy` (default), :func:`record_name_strategy`,
:func:`topic_record_name_strategy`.  Every failure to serialize or deserialize, bad framing and
unknown schema ids included, raises :class:`SerializationError` (an
:class:`~odradek.errors.OdradekError`).

Avro needs fastavro, JSON Schema jsonschema, Protobuf protobuf: ``pip install 'odradek[registry]'``.
"""

from odradek.client.serde._registry import (
    AsyncSchemaRegistryClient,
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
)
from odradek.client.serde._serde import (
    AsyncAvroDeserializer,
    AsyncAvroSerializer,
    AsyncJSONDeserializer,
    AsyncJSONSerializer,
    AsyncProtobufDeserializer,
    AsyncProtobufSerializer,
    AvroDeserializer,
    AvroSerializer,
    JSONDeserializer,
    JSONSerializer,
    ProtobufDeserializer,
    ProtobufSerializer,
)
from odradek.client.serde._wire import (
    MAGIC_BYTE,
    SchemaRegistryError,
    SerializationError,
    SubjectNameStrategy,
    record_name_strategy,
    topic_name_strategy,
    topic_record_name_strategy,
)

__all__ = [
    "MAGIC_BYTE",
    "AsyncAvroDeserializer",
    "AsyncAvroSerializer",
    "AsyncJSONDeserializer",
    "AsyncJSONSerializer",
    "AsyncProtobufDeserializer",
    "AsyncProtobufSerializer",
    "AsyncSchemaRegistryClient",
    "AvroDeserializer",
    "AvroSerializer",
    "JSONDeserializer",
    "JSONSerializer",
    "ProtobufDeserializer",
    "ProtobufSerializer",
    "RegisteredSchema",
    "Schema",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SerializationError",
    "SubjectNameStrategy",
    "record_name_strategy",
    "topic_name_strategy",
    "topic_record_name_strategy",
]
