"""Typed keys and values: registry-framed Avro, JSON Schema and Protobuf as struct columns.

The source's ``keyFormat`` / ``valueFormat`` (``avro``, ``json``, ``protobuf``; ``binary`` the
default) turn
the key or value column into a struct typed by the latest schema of the topic's subject
(TopicNameStrategy: ``<topic>-key`` / ``<topic>-value``), looked up on the driver when the
query is planned.  Each record is framed the Confluent way (a 0 byte, the 4-byte big-endian id
of the writer's schema, the payload); the executors fetch each writer schema once per process
and decode Avro with Avro's schema resolution (the writer's schema against the reader's, as
fastavro's ``schemaless_reader`` does it), into Arrow: column-wise by the compiled decoder of
:mod:`._avrofast` where it can (no Python object per record), else record by record with fastavro.

Types are those spark-avro gives (``SchemaConverters.toSqlType``): records are structs, arrays
arrays, maps maps with string keys, enums strings, fixed and bytes binary, ``[null, T]`` a
nullable T, ``[int, long]`` a long, ``[float, double]`` a double, other unions a struct of
``member0``, ``member1``, ...; logical types date, timestamp-millis/micros (timestamp),
local-timestamp-millis/micros (timestamp_ntz), decimal, uuid (string), time-millis (int) and
time-micros (long).  JSON Schema: an object with properties is a struct, an array an array,
string/integer/number/boolean string/long/double/boolean; anything else (no type, ``oneOf``,
free-form objects) the value's JSON text as a string.  Protobuf: see :func:`_proto_arrow`;
records are read with the latest schema's message of the name their message indexes give.

``mode``: ``FAILFAST`` (the default, as ``from_avro``) fails the query on a record that cannot
be decoded, naming its topic, partition and offset; ``PERMISSIVE`` gives a null struct and the
record's bytes in the corrupt-record column (``columnNameOfCorruptRecord``, default
``_corrupt_record``).

The sink: a struct ``key`` or ``value`` column is encoded with the subject's latest schema, or
with the schema derived from the struct's type (spark-avro's ``toAvroType``) registered first
with ``autoRegister=true``; Confluent framing.  Python over pyarrow and fastavro (no pyspark), and
the optional compiled Avro decoder.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import logging
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from odradek.errors import OdradekError
from odradek.schemas.framing import HEADER_BYTES, FramingError, decode_message_indexes, frame_header
from odradek.schemas.framing import schema_id as framed_id
from odradek.spark._avrofast import ColumnDecoder

log = logging.getLogger(__name__)

__all__ = [
    "CORRUPT_COLUMN",
    "FORMATS",
    "MalformedRecordError",
    "RegistryClient",
    "SchemaMappingError",
    "TypedColumn",
    "TypedOptions",
    "apply_typed",
    "arrow_type_of",
    "avro_of_arrow",
    "encode_typed",
    "parse_typed_options",
    "resolve_typed",
    "resolve_typed_sink",
]

FORMATS = ("binary", "avro", "json", "protobuf")
MODES = ("PERMISSIVE", "FAILFAST")
CORRUPT_COLUMN = "_corrupt_record"
_SOURCE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
DEFAULT_REGISTRY_PORT = 8081
_MEDIA = "application/vnd.schemaregistry.v1+json"


class SchemaMappingError(OdradekError, ValueError):
    """A schema that has no struct column (a recursive Avro type, say), or a registry answer
    that is not one."""


class MalformedRecordError(OdradekError, RuntimeError):
    """FAILFAST: a record that cannot be decoded with its writer's schema."""


# ---------------------------------------------------------------------------------------------
# options


@dataclass(frozen=True)
class TypedOptions:
    """The typed options of a source or sink (``*_format`` ``binary``: the column as bytes)."""

    key_format: str = "binary"
    value_format: str = "binary"
    registry_url: str | None = None  # None: the brokers' own (discover_registry_url)
    #: ``user:password`` for the registry's HTTP Basic authentication
    registry_user_info: str | None = None
    mode: str = "FAILFAST"
    corrupt_column: str = CORRUPT_COLUMN
    auto_register: bool = False

    @property
    def typed(self) -> bool:
        """Whether the key or the value has a format other than ``binary``."""
        return self.key_format != "binary" or self.value_format != "binary"


def parse_typed_options(opts: Mapping[str, str], *, sink: bool = False) -> TypedOptions:
    """``opts``: the options with lower-case names."""
    formats = []
    for name in ("keyFormat", "valueFormat"):
        value = opts.get(name.lower(), "binary").strip().lower()
        if value not in FORMATS:
            raise ValueError(f"Option '{name}' must be one of {', '.join(FORMATS)}, not {opts[name.lower()]!r}")
        formats.append(value)
    mode = opts.get("mode", "FAILFAST").strip().upper()
    if mode not in MODES:
        raise ValueError(f"Option 'mode' must be PERMISSIVE or FAILFAST, not {opts['mode']!r}")
    url = opts.get("schema.registry.url")
    auto = opts.get("autoregister", "false").strip().lower()
    if auto not in ("true", "false"):
        raise ValueError(f"Option 'autoRegister' must be true or false, not {opts['autoregister']!r}")
    corrupt = opts.get("columnnameofcorruptrecord", CORRUPT_COLUMN).strip()
    if not corrupt or corrupt in _SOURCE_COLUMNS:
        raise ValueError(f"Option 'columnNameOfCorruptRecord' must name a column of its own, not {corrupt!r}")
    return TypedOptions(
        key_format=formats[0],
        value_format=formats[1],
        registry_url=url.strip().rstrip("/") if url and url.strip() else None,
        registry_user_info=opts.get("schema.registry.basic.auth.user.info"),
        mode=mode,
        corrupt_column=corrupt,
        auto_register=auto == "true",
    )


def default_registry_url(bootstrap: str) -> str:
    """The registry's default address at the first bootstrap server's host."""
    first = bootstrap.split(",")[0].strip()
    host = first.rsplit(":", 1)[0] if ":" in first else first
    host = host.split("://")[-1] or "127.0.0.1"
    return f"http://{host}:{DEFAULT_REGISTRY_PORT}"


def _listener_url(value: str | None, host: str) -> str | None:
    """A broker's ``schema.registry.listeners`` as the URL a client reaches (None: unknown)."""
    if value is None:  # unset: the registry's default listener (the single-node default)
        return f"http://{host}:{DEFAULT_REGISTRY_PORT}"
    first = value.split(",")[0].strip()
    parsed = urllib.parse.urlsplit(first)
    if not parsed.scheme or parsed.port in (None, 0):
        return None
    shown = parsed.hostname if parsed.hostname not in (None, "", "0.0.0.0", "::") else host
    shown = f"[{shown}]" if shown and ":" in shown else shown
    return f"{parsed.scheme}://{shown}:{parsed.port}"


def discover_registry_url(client_options: Mapping[str, Any]) -> str:
    """The broker's own schema registry: its ``schema.registry.listeners`` (DescribeConfigs of
    the brokers, the first that has one), else the default port at the bootstrap host.  A
    listener on an ephemeral port (``:0``) cannot be found this way: the error says to give
    ``schema.registry.url``."""
    from odradek.client import Admin, ConfigResource

    bootstrap = str(client_options.get("bootstrap.servers", ""))
    try:
        with Admin(dict(client_options)) as admin:
            nodes = admin.describe_cluster().brokers[:8]
            configs = admin.describe_configs([ConfigResource("broker", str(n.id)) for n in nodes])
    except Exception as exc:  # not a reason to fail: fall back to the default address
        log.info("schema registry: cannot ask the brokers for their registry (%s); trying %s", exc, default_registry_url(bootstrap))
        return default_registry_url(bootstrap)
    off = 0
    for node in nodes:
        entries = next((v for k, v in configs.items() if getattr(k, "name", None) == str(node.id)), None)
        if not isinstance(entries, Mapping) or "schema.registry.listeners" not in entries:
            continue  # a broker that does not know the config (not Odradek): the default below
        value = entries["schema.registry.listeners"].value
        if value is not None and not value.strip():
            off += 1
            continue
        url = _listener_url(value, node.host)
        if url is not None:
            return url
        raise SchemaMappingError(
            f"the schema registry of broker {node.id} listens on {value} (an ephemeral port, not announced over "
            "the Kafka protocol): give its URL with the option 'schema.registry.url'"
        )
    if nodes and off == len(nodes):
        raise SchemaMappingError(
            "no broker runs a schema registry (schema.registry.listeners is empty): give the option 'schema.registry.url'"
        )
    return default_registry_url(bootstrap)


# ---------------------------------------------------------------------------------------------
# the registry


class RegistryClient:
    """The few calls of Confluent's REST API the source and sink need."""

    def __init__(self, url: str, user_info: str | None = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Accept": _MEDIA}
        if user_info:
            self._headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode()

    def _call(self, path: str, body: Any = None) -> Any:
        import urllib.error  # here: urllib.request (~50 ms) only where a registry is asked
        import urllib.request

        data = json.dumps(body).encode() if body is not None else None
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = _MEDIA
        req = urllib.request.Request(self.url + path, data=data, method="POST" if data is not None else "GET", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("message", "")
            except (ValueError, AttributeError):
                message = ""
            raise SchemaMappingError(f"schema registry {self.url}{path}: HTTP {exc.code} {message}".rstrip()) from None
        except (urllib.error.URLError, OSError) as exc:
            raise SchemaMappingError(f"schema registry {self.url} is not reachable: {exc}") from None

    @staticmethod
    def _quote(subject: str) -> str:
        return urllib.parse.quote(subject, safe="")

    def latest(self, subject: str) -> tuple[int, str, str]:
        """The subject's latest ``(id, schemaType, schema)``."""
        answer = self._call(f"/subjects/{self._quote(subject)}/versions/latest")
        if answer.get("references"):
            raise SchemaMappingError(f"subject {subject}: schemas with references are not supported by the odradek data source yet")
        return int(answer["id"]), answer.get("schemaType", "AVRO"), answer["schema"]

    def by_id(self, schema_id: int, *, serialized: bool = False) -> tuple[str, str]:
        """``(schemaType, schema)``; ``serialized``: a Protobuf schema as its base64 file descriptor."""
        answer = self._call(f"/schemas/ids/{schema_id}" + ("?format=serialized" if serialized else ""))
        return answer.get("schemaType", "AVRO"), answer["schema"]

    def register(self, subject: str, schema_type: str, schema: str) -> int:
        """Register ``schema`` under ``subject`` (POST /subjects/.../versions); its schema id."""
        body: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        return int(self._call(f"/subjects/{self._quote(subject)}/versions", body)["id"])


# ---------------------------------------------------------------------------------------------
# Avro -> Arrow (spark-avro's mapping)

_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_NTZ = pa.timestamp("us")
#: millisecond timestamps are built from their numbers as such, then cast to Spark's micros
_TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")
_NTZ_MS = pa.timestamp("ms")


class _Avro:
    """One Avro schema's Arrow type, and the fix-ups of fastavro's values that Arrow needs."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}
        self.stack: list[str] = []

    def _fullname(self, node: Mapping[str, Any], namespace: str) -> str:
        name = str(node["name"])
        if "." in name:
            return name
        ns = node.get("namespace", namespace)
        return f"{ns}.{name}" if ns else name

    def convert(self, node: Any, namespace: str = "") -> tuple[pa.DataType, bool, Callable[[Any], Any] | None]:
        """``(type, nullable, fix)``; ``fix`` is None when fastavro's value goes to Arrow as is."""
        if isinstance(node, str):
            if node in _PRIMITIVES:
                return _PRIMITIVES[node], node == "null", None
            full = node if "." in node or not namespace else f"{namespace}.{node}"
            if full in self.stack or node in self.stack:
                raise SchemaMappingError(f"Found recursive reference in Avro schema, which can not be processed by Spark: {node}")
            target = self.named.get(full) or self.named.get(node)
            if target is None:
                raise SchemaMappingError(f"Avro type {node} is not defined")
            return target
        if isinstance(node, list):
            return self._union(node, namespace)
        kind = node.get("type")
        logical = node.get("logicalType")
        if logical is not None:
            found = self._logical(node, kind, logical)
            if found is not None:
                return found
        if kind == "record" or kind == "error":
            full = self._fullname(node, namespace)
            self.stack.append(full)
            ns = full.rpartition(".")[0]
            fields, fixes = [], []
            for f in node.get("fields", []):
                t, _, fix = self.convert(f["type"], ns)
                fields.append(pa.field(f["name"], t, nullable=True))
                if fix is not None:
                    fixes.append((f["name"], fix))
            self.stack.pop()
            result = pa.struct(fields), False, _record_fix(fixes)
            self.named[full] = result
            return result
        if kind == "enum":
            result = pa.string(), False, None
            self.named[self._fullname(node, namespace)] = result
            return result
        if kind == "fixed":
            result = pa.binary(), False, None
            self.named[self._fullname(node, namespace)] = result
            return result
        if kind == "array":
            t, _, fix = self.convert(node["items"], namespace)
            return pa.list_(pa.field("element", t, nullable=True)), False, (_list_fix(fix) if fix else None)
        if kind == "map":
            t, _, fix = self.convert(node["values"], namespace)
            return pa.map_(pa.string(), pa.field("value", t, nullable=True)), False, _map_fix(fix)
        if isinstance(kind, (str, list, dict)):
            return self.convert(kind, namespace)
        raise SchemaMappingError(f"Unsupported Avro type {node!r}")

    def _logical(self, node: Mapping[str, Any], kind: Any, logical: str) -> tuple[pa.DataType, bool, Callable[[Any], Any] | None] | None:
        # the executors read these logical types as their plain ints and strings (see _plain):
        # Arrow makes dates and timestamps of the numbers, with no Python object per value
        if logical == "date" and kind == "int":
            return pa.date32(), False, None
        if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
            return (_TIMESTAMP_MS if logical.endswith("millis") else _TIMESTAMP), False, None
        if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
            return (_NTZ_MS if logical.endswith("millis") else _NTZ), False, None
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = int(node.get("precision", 0)), int(node.get("scale", 0))
            if 0 < precision <= 38:
                if kind == "fixed":
                    self.named[str(node.get("name"))] = (pa.decimal128(precision, scale), False, None)
                return pa.decimal128(precision, scale), False, None
        return None  # uuid (a string), time-millis (an int), time-micros (a long): as they are

    def _union(self, branches: list[Any], namespace: str) -> tuple[pa.DataType, bool, Callable[[Any], Any] | None]:
        others = [b for b in branches if b != "null"]
        nullable = len(others) < len(branches)
        if not others:
            return pa.null(), True, None
        if len(others) == 1:
            t, _, fix = self.convert(others[0], namespace)
            return t, True, fix
        if set(others) <= {"int", "long"} and all(isinstance(b, str) for b in others):
            return pa.int64(), nullable, None
        if set(others) <= {"float", "double"} and all(isinstance(b, str) for b in others):
            return pa.float64(), nullable, None
        members = [self.convert(b, namespace) for b in others]
        kinds = [_python_kind(b, self.named) for b in others]
        fields = [pa.field(f"member{i}", m[0], nullable=True) for i, m in enumerate(members)]
        fixes = [m[2] for m in members]

        def union_fix(value: Any) -> Any:
            if value is None:
                return None
            for i, check in enumerate(kinds):
                if check(value):
                    f = fixes[i]
                    return {f"member{i}": f(value) if f is not None else value}
            raise TypeError(f"no union branch for {type(value).__name__}")

        return pa.struct(fields), nullable, union_fix


def _python_kind(branch: Any, named: Mapping[str, Any]) -> Callable[[Any], bool]:
    kind = branch if isinstance(branch, str) else branch.get("type") if isinstance(branch, dict) else "union"
    if isinstance(branch, dict) and branch.get("logicalType") == "decimal":
        return lambda v: isinstance(v, decimal.Decimal)
    checks: dict[str, Callable[[Any], bool]] = {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float),
        "double": lambda v: isinstance(v, float),
        "string": lambda v: isinstance(v, str),
        "enum": lambda v: isinstance(v, str),
        "bytes": lambda v: isinstance(v, bytes),
        "fixed": lambda v: isinstance(v, bytes),
        "record": lambda v: isinstance(v, dict),
        "error": lambda v: isinstance(v, dict),
        "map": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    if kind in checks:
        return checks[kind]
    return lambda v: isinstance(v, dict)  # a named type by reference: a record, most likely


def _record_fix(fixes: list[tuple[str, Callable[[Any], Any]]]) -> Callable[[Any], Any] | None:
    if not fixes:
        return None

    def fix(value: Any) -> Any:
        if value is None:
            return None
        for name, f in fixes:
            value[name] = f(value.get(name))
        return value

    return fix


def _list_fix(item: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else [item(x) for x in v]


def _map_fix(item: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    if item is None:
        return lambda v: None if v is None else list(v.items())
    return lambda v: None if v is None else [(k, item(x)) for k, x in v.items()]


def spark_arrow_type(t: pa.DataType) -> pa.DataType:
    """The type Spark takes of a built column's type: timestamps in microseconds."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(spark_arrow_type(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(spark_arrow_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_field, t.item_field.with_type(spark_arrow_type(t.item_type)))
    return t


#: logical types the executors read as their plain type (Arrow converts the numbers)
_PLAIN_LOGICAL = frozenset({
    "date", "timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros",
    "time-millis", "time-micros", "uuid",
})


def _plain(node: Any) -> Any:
    """The schema with the logical types of ``_PLAIN_LOGICAL`` removed (decimals kept)."""
    if isinstance(node, list):
        return [_plain(b) for b in node]
    if not isinstance(node, dict):
        return node
    out = {k: _plain(v) if k in ("type", "items", "values", "fields") else v for k, v in node.items()}
    if isinstance(node.get("fields"), list):
        out["fields"] = [{**f, "type": _plain(f.get("type"))} for f in node["fields"]]
    if out.get("logicalType") in _PLAIN_LOGICAL and isinstance(out.get("type"), str):
        out.pop("logicalType")
        if len(out) == 1:
            return out["type"]
    return out


def _avro_arrow(schema: Any) -> tuple[pa.DataType, Callable[[Any], Any] | None]:
    t, _, fix = _Avro().convert(schema)
    if not pa.types.is_struct(t):  # spark-avro: a primitive top-level schema is a column of that type
        return pa.struct([pa.field("value", t, nullable=True)]), _wrap(fix)
    return t, fix


def _wrap(fix: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    if fix is None:
        return lambda v: {"value": v}
    return lambda v: {"value": fix(v)}


# ---------------------------------------------------------------------------------------------
# JSON Schema -> Arrow


def _json_arrow(schema: Any) -> tuple[pa.DataType, Callable[[Any], Any]]:
    root = schema

    def deref(node: Any, depth: int = 0) -> Any:
        while isinstance(node, dict) and "$ref" in node and depth < 32:
            ref = str(node["$ref"])
            if not ref.startswith("#"):
                raise SchemaMappingError(f"JSON Schema reference {ref} is not supported by the odradek data source")
            target: Any = root
            for part in ref.lstrip("#").strip("/").split("/"):
                if part:
                    target = target[part.replace("~1", "/").replace("~0", "~")]
            node, depth = target, depth + 1
        return node

    def convert(node: Any, depth: int = 0) -> tuple[pa.DataType, Callable[[Any], Any]]:
        if depth > 32:
            raise SchemaMappingError("JSON Schema nested too deep (or recursive) for a struct column")
        node = deref(node)
        kind = node.get("type") if isinstance(node, dict) else None
        if isinstance(kind, list):
            others = [k for k in kind if k != "null"]
            kind = others[0] if len(others) == 1 else None
        if kind == "object" and isinstance(node.get("properties"), dict) and node["properties"]:
            props = node["properties"]
            converted = {name: convert(sub, depth + 1) for name, sub in props.items()}
            fields = [pa.field(name, t, nullable=True) for name, (t, _) in converted.items()]
            fixes = [(name, f) for name, (_, f) in converted.items()]

            def obj(v: Any) -> Any:
                if v is None:
                    return None
                if not isinstance(v, dict):
                    raise TypeError("not an object")
                return {name: f(v.get(name)) for name, f in fixes}

            return pa.struct(fields), obj
        if kind == "array" and isinstance(node.get("items"), dict):
            t, f = convert(node["items"], depth + 1)

            def arr(v: Any) -> Any:
                if v is None:
                    return None
                if not isinstance(v, list):
                    raise TypeError("not an array")
                return [f(x) for x in v]

            return pa.list_(pa.field("element", t, nullable=True)), arr
        simple = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
        if kind in simple:
            return simple[kind], _same
        return pa.string(), _json_text

    t, fix = convert(schema)
    if not pa.types.is_struct(t):
        return pa.struct([pa.field("value", t, nullable=True)]), lambda v: {"value": fix(v)}
    return t, fix


def _same(v: Any) -> Any:
    return v


def _json_text(v: Any) -> Any:
    return None if v is None else json.dumps(v, separators=(",", ":"))


def arrow_type_of(schema_type: str, text: str) -> pa.DataType:
    """The struct type of a registry schema (``AVRO`` or ``JSON``), as Spark takes it."""
    return spark_arrow_type(_converter(schema_type, text)[0])


def _converter(schema_type: str, text: str) -> tuple[pa.DataType, Callable[[Any], Any] | None]:
    if schema_type == "PROTOBUF":
        return _converter_of(schema_type, text)
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise SchemaMappingError(f"the registry's schema is not JSON: {exc}") from None
    if schema_type == "AVRO":
        return _avro_arrow(parsed)
    if schema_type == "JSON":
        return _json_arrow(parsed)
    raise SchemaMappingError(f"schema type {schema_type} is not supported by the odradek data source yet")


def _converter_of(schema_type: str, text: str) -> tuple[pa.DataType, Callable[[Any], Any] | None]:
    if schema_type == "PROTOBUF":
        return _proto_arrow(_proto_message(text, [0]).DESCRIPTOR)
    return _converter(schema_type, text)


# ---------------------------------------------------------------------------------------------
# Protobuf -> Arrow (the schema given as the base64 file descriptor the registry serves with
# ?format=serialized)

_PROTO_POOLS: dict[str, Any] = {}


def _proto_file(serialized: str) -> Any:
    """The file descriptor of a base64 ``FileDescriptorProto``, in a pool of its own (two versions
    of one schema have one file name); Google's well-known imports come from the runtime."""
    found = _PROTO_POOLS.get(serialized)
    if found is not None:
        return found
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool
    except ImportError:
        raise SchemaMappingError("Protobuf needs the protobuf package (pip install 'odradek[registry]')") from None
    try:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    except Exception as exc:
        raise SchemaMappingError(f"not a serialized Protobuf file descriptor: {exc}") from None
    pool = descriptor_pool.DescriptorPool()
    for dep in fdp.dependency:
        if not dep.startswith("google/protobuf/"):
            raise SchemaMappingError(f"Protobuf schema imports {dep}: schemas with references are not supported by the odradek data source yet")
        known = descriptor_pool.Default().FindFileByName(dep)
        pool.AddSerializedFile(known.serialized_pb)
    try:
        found = pool.AddSerializedFile(fdp.SerializeToString())
    except Exception as exc:
        raise SchemaMappingError(f"Protobuf file descriptor refused: {exc}") from None
    _PROTO_POOLS[serialized] = found
    return found


def _proto_message(serialized: str, indexes: list[int]) -> Any:
    """The message class of the message a Confluent message-index path names in the file."""
    from google.protobuf import message_factory

    fd = _proto_file(serialized)
    if not fd.message_types_by_name:
        raise SchemaMappingError("Protobuf schema without a message")
    desc = None
    scope = list(fd.message_types_by_name.values())
    for i in indexes:
        if not 0 <= i < len(scope):
            raise _Bad(f"message index {indexes} is not in the schema")
        desc = scope[i]
        scope = list(desc.nested_types)
    return message_factory.GetMessageClass(desc)


def _proto_arrow(desc: Any, depth: int = 0) -> tuple[pa.DataType, Callable[[Any], Any]]:
    """spark-protobuf's mapping: messages are structs (unset ones null), repeated fields arrays,
    maps maps, enums their names, int32/sint32/sfixed32 int, int64/sint64/sfixed64 long,
    uint32/fixed32 long, uint64/fixed64 decimal(20,0), google.protobuf.Timestamp a timestamp."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if depth > 32:
        raise SchemaMappingError(f"Found recursive reference in Protobuf schema, which can not be processed by Spark: {desc.full_name}")
    if desc.full_name == "google.protobuf.Timestamp":
        return _TIMESTAMP, lambda m: m.seconds * 1_000_000 + m.nanos // 1000
    scalars = {
        F.TYPE_INT32: pa.int32(), F.TYPE_SINT32: pa.int32(), F.TYPE_SFIXED32: pa.int32(),
        F.TYPE_INT64: pa.int64(), F.TYPE_SINT64: pa.int64(), F.TYPE_SFIXED64: pa.int64(),
        F.TYPE_UINT32: pa.int64(), F.TYPE_FIXED32: pa.int64(),
        F.TYPE_UINT64: pa.decimal128(20, 0), F.TYPE_FIXED64: pa.decimal128(20, 0),
        F.TYPE_BOOL: pa.bool_(), F.TYPE_FLOAT: pa.float32(), F.TYPE_DOUBLE: pa.float64(),
        F.TYPE_STRING: pa.string(), F.TYPE_BYTES: pa.binary(),
    }
    unsigned64 = (F.TYPE_UINT64, F.TYPE_FIXED64)

    def one(f: Any) -> tuple[pa.DataType, Callable[[Any], Any]]:
        if f.type == F.TYPE_MESSAGE or f.type == F.TYPE_GROUP:
            return _proto_arrow(f.message_type, depth + 1)
        if f.type == F.TYPE_ENUM:
            values = f.enum_type.values_by_number
            return pa.string(), lambda v: values[v].name if v in values else str(v)
        if f.type in unsigned64:
            return scalars[f.type], decimal.Decimal
        return scalars[f.type], _same

    fields: list[pa.Field] = []
    getters: list[tuple[str, Callable[[Any], Any]]] = []
    for f in desc.fields:
        name = f.name
        if f.type == F.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            kt, kf = one(f.message_type.fields_by_name["key"])
            vt, vf = one(f.message_type.fields_by_name["value"])
            fields.append(pa.field(name, pa.map_(kt, pa.field("value", vt, nullable=True))))
            getters.append((name, _proto_map(name, kf, vf)))
        elif f.is_repeated:
            t, g = one(f)
            fields.append(pa.field(name, pa.list_(pa.field("element", t, nullable=True))))
            getters.append((name, _proto_list(name, g)))
        else:
            t, g = one(f)
            fields.append(pa.field(name, t, nullable=True))
            getters.append((name, _proto_field(name, g, f.type == F.TYPE_MESSAGE or f.has_presence)))
    return pa.struct(fields), lambda m: {n: g(m) for n, g in getters}


def _proto_map(name: str, kf: Callable[[Any], Any], vf: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda m: [(kf(k), vf(v)) for k, v in getattr(m, name).items()]


def _proto_list(name: str, g: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda m: [g(v) for v in getattr(m, name)]


def _proto_field(name: str, g: Callable[[Any], Any], presence: bool) -> Callable[[Any], Any]:
    if presence:  # a message, or an optional scalar: null when not set
        return lambda m: g(getattr(m, name)) if m.HasField(name) else None
    return lambda m: g(getattr(m, name))


def _message_indexes(data: bytes, pos: int) -> tuple[list[int], int]:
    """Confluent's message-index array after the schema id (:mod:`odradek.schemas.framing`)."""
    try:
        return decode_message_indexes(data, pos)
    except FramingError as exc:
        raise _Bad(str(exc)) from None


def _proto_decoder(col: TypedColumn) -> Callable[[bytes], Any]:
    """Records decoded with the reader's (latest) message of the name the writer's message-index
    path names: Protobuf's own evolution rules (unknown fields skipped, missing ones default)."""
    classes: dict[tuple[int, tuple[int, ...]], Any] = {}

    def message_class(sid: int, indexes: list[int]) -> Any:
        key = (sid, tuple(indexes))
        found = classes.get(key)
        if found is None:
            if sid == col.schema_id or indexes == [0]:
                found = _proto_message(col.schema, indexes)
            else:  # the writer's path, by name in the reader's file
                try:
                    schema_type, text = _CACHE.writer(col, sid, serialized=True)
                except SchemaMappingError as exc:
                    raise _Bad(f"writer schema id {sid}: {exc}") from None
                if schema_type != "PROTOBUF":
                    raise _Bad(f"writer schema id {sid} is {schema_type}, not PROTOBUF")
                name = _proto_message(text, indexes).DESCRIPTOR.full_name
                from google.protobuf import message_factory

                try:
                    desc = _proto_file(col.schema).pool.FindMessageTypeByName(name)
                except KeyError:
                    raise _Bad(f"message {name} of writer schema id {sid} is not in the reader's schema") from None
                found = message_factory.GetMessageClass(desc)
            classes[key] = found
        return found

    first = _proto_message(col.schema, [0])

    def decode(data: bytes) -> Any:
        sid = framed_id(data)
        if sid is None or len(data) <= HEADER_BYTES:
            raise _Bad("not framed with a schema id (magic byte 0, a 4-byte id and the message indexes)")
        indexes, pos = _message_indexes(data, HEADER_BYTES)
        cls = message_class(sid, indexes)
        if cls is not first:
            raise _Bad(f"message {cls.DESCRIPTOR.full_name} is not the column's {first.DESCRIPTOR.full_name}")
        try:
            return cls.FromString(bytes(data[pos:]))
        except Exception as exc:
            raise _Bad(f"Protobuf data does not match writer schema id {sid}: {type(exc).__name__}: {exc}") from None

    return decode


# ---------------------------------------------------------------------------------------------
# the driver: what each typed column reads with


@dataclass(frozen=True)
class TypedColumn:
    """One typed column of a read: everything an executor needs (pickled to it)."""

    part: str  # "key" | "value"
    fmt: str  # "avro" | "json"
    topic: str
    subject: str
    url: str
    user_info: str | None
    schema_id: int  # the reader schema: the subject's latest when the query was planned
    schema_type: str
    schema: str
    arrow_type: pa.DataType


def _schema_type(fmt: str) -> str:
    return {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}[fmt]


def resolve_typed(opts: TypedOptions, topics: tuple[str, ...], admin_config: Mapping[str, Any]) -> tuple[TypedColumn, ...]:
    """Look up the reader schemas of the typed columns (one topic, TopicNameStrategy)."""
    if not opts.typed:
        return ()
    if len(topics) != 1:
        raise ValueError(
            "keyFormat / valueFormat other than binary need exactly one topic (option 'subscribe' with one "
            "topic, or 'assign' of one topic's partitions): its subjects <topic>-key / <topic>-value give the schema"
        )
    topic = topics[0]
    url = opts.registry_url or discover_registry_url(admin_config)
    client = RegistryClient(url, opts.registry_user_info)
    out = []
    for part, fmt in (("key", opts.key_format), ("value", opts.value_format)):
        if fmt == "binary":
            continue
        subject = f"{topic}-{part}"
        schema_id, schema_type, text = client.latest(subject)
        if schema_type != _schema_type(fmt):
            raise SchemaMappingError(
                f"{part}Format is {fmt} but the latest schema of subject {subject} (id {schema_id}) is {schema_type}"
            )
        if schema_type == "PROTOBUF":  # the file descriptor, as Confluent's deserializers ask for it
            text = client.by_id(schema_id, serialized=True)[1]
        out.append(TypedColumn(part, fmt, topic, subject, url, opts.registry_user_info, schema_id, schema_type, text,
                               arrow_type_of(schema_type, text)))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# the executors: decoding


class _Cache:
    """Per executor process: the registry's answers by id, the parsed schemas, the readers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writers: dict[tuple[str, int, bool], tuple[str, str]] = {}
        self.parsed: dict[tuple[str, int, bool], Any] = {}
        self.readers: dict[tuple[Any, ...], Any] = {}

    def writer(self, col: TypedColumn, schema_id: int, *, serialized: bool = False) -> tuple[str, str]:
        key = (col.url, schema_id, serialized)
        found = self.writers.get(key)
        if found is None:
            with self.lock:
                found = self.writers.get(key)
                if found is None:
                    found = RegistryClient(col.url, col.user_info).by_id(schema_id, serialized=serialized)
                    self.writers[key] = found
        return found

    def avro(self, url: str, schema_id: int, text: str, *, plain: bool = True) -> Any:
        """The parsed schema; ``plain``: for reading, its dates and timestamps as numbers."""
        key = (url, schema_id, plain)
        found = self.parsed.get(key)
        if found is None:
            import fastavro

            schema = json.loads(text)
            found = fastavro.parse_schema(_plain(schema) if plain else schema)
            self.parsed[key] = found
        return found


_CACHE = _Cache()


class _Bad(Exception):
    pass


def _avro_schemas(col: TypedColumn, sid: int) -> tuple[Any, Any]:
    """The ``(writer, reader)`` arguments of fastavro's reader for writer schema id ``sid``
    (``_Bad`` when the registry has no Avro schema of that id)."""
    reader = _CACHE.avro(col.url, col.schema_id, col.schema)
    text = col.schema
    if sid != col.schema_id:
        try:
            schema_type, text = _CACHE.writer(col, sid)
        except SchemaMappingError as exc:
            raise _Bad(f"writer schema id {sid}: {exc}") from None
        if schema_type != "AVRO":
            raise _Bad(f"writer schema id {sid} is {schema_type}, not AVRO")
    if _empty_items(json.loads(text), {}):
        # a corrupt record could claim 2**63 items of zero bytes each: a loop without end
        raise _Bad(f"writer schema id {sid} has an array of items of zero bytes (null, an empty record), "
                   "which the odradek data source does not read")
    if sid == col.schema_id:
        return reader, None
    return _CACHE.avro(col.url, sid, text), reader


def _zero_bytes(node: Any, named: dict[str, Any], depth: int = 0) -> bool:
    """Whether a value of this Avro type can be encoded in no bytes at all."""
    if depth > 64:
        return False
    if isinstance(node, str):
        if node == "null":
            return True
        target = named.get(node) or named.get(node.rpartition(".")[2])
        return target is not None and _zero_bytes(target, named, depth + 1)
    if isinstance(node, list):
        return False  # a union's branch index is at least one byte
    if isinstance(node, dict):
        kind = node.get("type")
        if kind in ("record", "error"):
            return all(_zero_bytes(f.get("type"), named, depth + 1) for f in node.get("fields", []))
        if kind == "fixed":
            return int(node.get("size", 1)) == 0
        if kind == "enum":
            return False
        if isinstance(kind, (str, list, dict)) and kind not in ("array", "map"):
            return _zero_bytes(kind, named, depth + 1)
    return False


def _empty_items(node: Any, named: dict[str, Any], depth: int = 0) -> bool:
    """Whether the schema has an array or map whose items can take no bytes."""
    if depth > 64:
        return False
    if isinstance(node, list):
        return any(_empty_items(b, named, depth + 1) for b in node)
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    if kind in ("record", "error", "enum", "fixed") and "name" in node:
        named[str(node["name"])] = node
        if node.get("namespace"):
            named[f"{node['namespace']}.{node['name']}"] = node
    if kind in ("record", "error"):
        return any(_empty_items(f.get("type"), named, depth + 1) for f in node.get("fields", []))
    if kind == "array":
        return _zero_bytes(node.get("items"), named) or _empty_items(node.get("items"), named, depth + 1)
    if kind == "map":
        return _empty_items(node.get("values"), named, depth + 1)  # keys are strings: at least one byte
    if isinstance(kind, (list, dict)):
        return _empty_items(kind, named, depth + 1)
    return False


def _avro_decoder(col: TypedColumn) -> Callable[[bytes], Any]:
    from fastavro import schemaless_reader

    schemas: dict[int, tuple[Any, Any]] = {}

    def decode(data: bytes) -> Any:
        sid = framed_id(data)
        if sid is None:
            raise _Bad("not framed with a schema id (magic byte 0 and a 4-byte id)")
        pair = schemas.get(sid)
        if pair is None:
            pair = schemas[sid] = _avro_schemas(col, sid)
        buf = io.BytesIO(data)
        buf.seek(HEADER_BYTES)
        try:
            value = schemaless_reader(buf, *pair)
        except Exception as exc:  # fastavro raises many kinds on bad bytes or unresolvable schemas
            raise _Bad(f"Avro data does not match writer schema id {sid}: {type(exc).__name__}: {exc}") from None
        if buf.tell() != len(data):
            raise _Bad(f"{len(data) - buf.tell()} bytes left after the Avro record of writer schema id {sid}")
        return value

    return decode


def _avro_fast(col: TypedColumn, values: list[Any]) -> list[Any] | None:
    """Every value decoded in one tight loop, or None at the first thing out of the ordinary
    (a value not framed, an unknown id, bytes fastavro refuses or leaves over): the careful loop
    then decodes the column again and reports each bad record."""
    from fastavro import schemaless_reader

    known: dict[bytes, tuple[Any, Any]] = {}
    out: list[Any] = []
    append = out.append
    new = io.BytesIO
    try:
        for data in values:
            if data is None:
                append(None)
                continue
            head = data[:HEADER_BYTES]
            pair = known.get(head)
            if pair is None:
                sid = framed_id(head)
                if sid is None:
                    return None
                pair = known[head] = _avro_schemas(col, sid)
            buf = new(data)
            buf.seek(HEADER_BYTES)
            append(schemaless_reader(buf, *pair))
            if buf.tell() != len(data):
                return None
    except Exception:  # anything at all: the careful loop says what and where
        return None
    return out


_COLUMNAR: dict[tuple[str, int], ColumnDecoder] = {}


def _columnar(col: TypedColumn, built: pa.DataType) -> ColumnDecoder:
    """The compiled column decoder of the column's reader schema (see :mod:`._avrofast`)."""
    key = (col.url, col.schema_id)
    found = _COLUMNAR.get(key)
    if found is None:

        def writer_of(sid: int) -> Any:
            schema_type, text = _CACHE.writer(col, sid)
            if schema_type != "AVRO":
                raise _Bad(f"writer schema id {sid} is {schema_type}, not AVRO")
            return _plain(json.loads(text))

        found = _COLUMNAR[key] = ColumnDecoder(_plain(json.loads(col.schema)), col.schema_id, built, col.arrow_type, writer_of)
    return found


def _json_decoder(col: TypedColumn) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        if framed_id(data) is None:
            raise _Bad("not framed with a schema id (magic byte 0 and a 4-byte id)")
        try:
            return json.loads(bytes(data[HEADER_BYTES:]))
        except ValueError as exc:
            raise _Bad(f"not JSON: {exc}") from None

    return decode


_Decoder = tuple[Callable[[bytes], Any], Callable[[Any], Any] | None, pa.DataType]
_DECODERS: dict[tuple[Any, ...], _Decoder] = {}


def _decoder(col: TypedColumn) -> _Decoder:
    """The record decoder, the fix-up of its values and the Arrow type built from them."""
    key = (col.url, col.schema_id, col.fmt)
    found = _DECODERS.get(key)
    if found is None:
        decode = {"avro": _avro_decoder, "json": _json_decoder, "protobuf": _proto_decoder}[col.fmt](col)
        built, fix = _converter(col.schema_type, col.schema)
        found = decode, fix, built
        _DECODERS[key] = found
    return found


def _as_spark(array: pa.Array, col: TypedColumn) -> pa.Array:
    return array if array.type == col.arrow_type else array.cast(col.arrow_type)


def _decode_column(
    col: TypedColumn, column: pa.Array, offsets: pa.Array, partition: int, failfast: bool, bad: list[bool]
) -> pa.Array:
    decode, fix, built = _decoder(col)
    if col.fmt == "avro":
        fast = _columnar(col, built).decode(column)
        if fast is not None:
            return fast
    values = column.to_pylist()
    out = _avro_fast(col, values) if col.fmt == "avro" else None
    if out is not None and fix is not None:
        try:
            out = [fix(v) for v in out]
        except (TypeError, ValueError, KeyError, AttributeError):
            out = None
    if out is None:
        out = []
        append = out.append
        for i, data in enumerate(values):
            if data is None:
                append(None)
                continue
            try:
                value = decode(data)
                append(fix(value) if fix is not None else value)
            except (_Bad, TypeError, ValueError, KeyError, AttributeError) as exc:
                _malformed(col, offsets, partition, i, exc, failfast)
                bad[i] = True
                append(None)
    try:
        return _as_spark(pa.array(out, type=built), col)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    # a value Arrow refuses (an int out of range, a wrong JSON type): find it, record by record
    kept = []
    for i, value in enumerate(out):
        try:
            _as_spark(pa.array([value], type=built), col)  # a millisecond timestamp past microseconds' range too
            kept.append(value)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            _malformed(col, offsets, partition, i, exc, failfast)
            bad[i] = True
            kept.append(None)
    return _as_spark(pa.array(kept, type=built), col)


def _malformed(col: TypedColumn, offsets: pa.Array, partition: int, i: int, exc: BaseException, failfast: bool) -> None:
    if failfast:
        offset = offsets[i].as_py()
        raise MalformedRecordError(
            f"Malformed records are detected in record parsing: the {col.part} of the record at offset {offset} "
            f"of topic {col.topic} partition {partition} cannot be decoded as {col.fmt} with subject {col.subject}'s "
            f"schema id {col.schema_id}: {exc}. Current parse mode: FAILFAST. To process malformed records as a "
            "null result, try setting the option 'mode' as 'PERMISSIVE'."
        ) from None


def apply_typed(batch: pa.RecordBatch, columns: tuple[TypedColumn, ...], opts: TypedOptions, partition: int) -> pa.RecordBatch:
    """The batch with its typed columns decoded (and, PERMISSIVE, the corrupt-record column)."""
    failfast = opts.mode == "FAILFAST"
    n = batch.num_rows
    bad = [False] * n
    offsets = batch.column("offset")
    names = batch.schema.names
    arrays = list(batch.columns)
    fields = list(batch.schema)
    raw: dict[str, pa.Array] = {}
    for col in columns:
        i = names.index(col.part)
        raw[col.part] = arrays[i]
        arrays[i] = _decode_column(col, arrays[i], offsets, partition, failfast, bad)
        fields[i] = pa.field(col.part, col.arrow_type, nullable=True)
    if not failfast:
        source = raw.get("value", raw.get("key"))
        assert source is not None
        if any(bad):
            corrupt = pa.array([v if b else None for v, b in zip(source.to_pylist(), bad, strict=True)], pa.binary())
        else:
            corrupt = pa.nulls(n, pa.binary())
        arrays.append(corrupt)
        fields.append(pa.field(opts.corrupt_column, pa.binary(), nullable=True))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


# ---------------------------------------------------------------------------------------------
# the sink: Arrow -> Avro / JSON, Confluent framing


def avro_of_arrow(t: pa.DataType, name: str = "topLevelRecord", namespace: str = "") -> Any:
    """spark-avro's ``toAvroType`` of a struct column's type: nested records named after their
    field, in a namespace of the path; a nullable type is the union ``[type, "null"]``."""

    def conv(t: pa.DataType, name: str, ns: str) -> Any:
        if pa.types.is_struct(t):
            child_ns = f"{ns}.{name}" if ns else name
            rec: dict[str, Any] = {"type": "record", "name": name, "fields": []}
            if ns:
                rec["namespace"] = ns
            for f in t:
                ft = conv(f.type, f.name, child_ns)
                rec["fields"].append({"name": f.name, "type": [ft, "null"] if f.nullable else ft})
            return rec
        if pa.types.is_boolean(t):
            return "boolean"
        if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
            return "int"
        if pa.types.is_int64(t):
            return "long"
        if pa.types.is_float32(t):
            return "float"
        if pa.types.is_float64(t):
            return "double"
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "string"
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return "bytes"
        if pa.types.is_date(t):
            return {"type": "int", "logicalType": "date"}
        if pa.types.is_timestamp(t):
            return {"type": "long", "logicalType": "timestamp-micros" if t.tz else "local-timestamp-micros"}
        if pa.types.is_decimal(t):
            return {"type": "fixed", "name": name, "size": _decimal_size(t.precision), "logicalType": "decimal",
                    "precision": t.precision, "scale": t.scale} | ({"namespace": ns} if ns else {})
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            item = conv(t.value_type, name, ns)
            return {"type": "array", "items": [item, "null"] if t.value_field.nullable else item}
        if pa.types.is_map(t):
            if not pa.types.is_string(t.key_type):
                raise SchemaMappingError(f"Avro maps have string keys: {t} has no Avro type")
            item = conv(t.item_type, name, ns)
            return {"type": "map", "values": [item, "null"] if t.item_field.nullable else item}
        raise SchemaMappingError(f"type {t} has no Avro type")

    return conv(t, name, namespace)


def _decimal_size(precision: int) -> int:
    size = 1
    while 10**precision > 2 ** (8 * size - 1):
        size += 1
    return size


def json_schema_of_arrow(t: pa.DataType) -> Any:
    """A JSON Schema of a struct column's type (nullable fields allow null)."""
    if pa.types.is_struct(t):
        return {"type": "object", "properties": {f.name: _nullable_json(json_schema_of_arrow(f.type), f.nullable) for f in t}}
    if pa.types.is_boolean(t):
        return {"type": "boolean"}
    if pa.types.is_integer(t):
        return {"type": "integer"}
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return {"type": "number"}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "items": json_schema_of_arrow(t.value_type)}
    return {"type": "string"}


def _nullable_json(schema: dict[str, Any], nullable: bool) -> dict[str, Any]:
    if nullable and "type" in schema:
        return {**schema, "type": [schema["type"], "null"]}
    return schema


@dataclass(frozen=True)
class SinkColumn:
    """One typed column of a write: the schema it is encoded with."""

    part: str
    fmt: str
    schema_id: int
    schema: str


def resolve_typed_sink(
    opts: TypedOptions, topic: str | None, types: Mapping[str, pa.DataType], admin_config: Mapping[str, Any]
) -> tuple[SinkColumn, ...]:
    """On the driver: each typed column's schema id (the subject's latest, or the derived schema
    registered with ``autoRegister``)."""
    if not opts.typed:
        return ()
    if topic is None:
        raise ValueError("keyFormat / valueFormat other than binary need the 'topic' option: its subjects give the schema")
    client = RegistryClient(opts.registry_url or discover_registry_url(admin_config), opts.registry_user_info)
    out = []
    for part, fmt in (("key", opts.key_format), ("value", opts.value_format)):
        if fmt == "binary":
            continue
        if fmt == "protobuf":
            raise ValueError(f"{part}Format protobuf: the sink does not encode Protobuf yet (avro, json do)")
        if part not in types:
            raise ValueError(f"{part}Format is {fmt} but there is no '{part}' column")
        t = types[part]
        if not pa.types.is_struct(t):
            raise ValueError(f"{part}Format is {fmt}: the '{part}' column must be a struct, not {t}")
        subject = f"{topic}-{part}"
        if opts.auto_register:
            derived = avro_of_arrow(t) if fmt == "avro" else json_schema_of_arrow(t)
            text = json.dumps(derived)
            schema_id = client.register(subject, _schema_type(fmt), text)
        else:
            schema_id, schema_type, text = client.latest(subject)
            if schema_type != _schema_type(fmt):
                raise SchemaMappingError(f"{part}Format is {fmt} but the latest schema of subject {subject} is {schema_type}")
        out.append(SinkColumn(part, fmt, schema_id, text))
    return tuple(out)


def encode_typed(batch: pa.RecordBatch, columns: tuple[SinkColumn, ...]) -> pa.RecordBatch:
    """The batch with its struct columns encoded as Confluent-framed binary."""
    if not columns:
        return batch
    names = batch.schema.names
    arrays = list(batch.columns)
    fields = list(batch.schema)
    for col in columns:
        i = names.index(col.part)
        prefix = frame_header(col.schema_id)
        rows = arrays[i].to_pylist()
        encoded: list[bytes | None]
        if col.fmt == "avro":
            from fastavro import schemaless_writer

            schema = _CACHE.avro("sink", col.schema_id, col.schema, plain=False)
            encoded = []
            for row in rows:
                if row is None:
                    encoded.append(None)
                    continue
                buf = io.BytesIO()
                buf.write(prefix)
                schemaless_writer(buf, schema, row)
                encoded.append(buf.getvalue())
        else:
            encoded = [None if row is None else prefix + json.dumps(row, default=_json_default).encode() for row in rows]
        arrays[i] = pa.array(encoded, pa.binary())
        fields[i] = pa.field(col.part, pa.binary())
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _json_default(v: Any) -> Any:
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    raise TypeError(f"{type(v).__name__} is not JSON")

