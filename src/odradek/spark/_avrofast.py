"""Registry-framed Avro decoded column-wise by the compiled decoder, with no Python object per record.

A writer schema is compiled into a *program*: its nodes in pre-order, each ``(kind, null branch
or -1, index after its subtree, size or symbol count)``.  The compiled decoder
(:mod:`odradek.spark._avrocols`, built by ``setup.py`` when a compiler is there) runs it over the
values of an Arrow binary column that carry one writer schema id and writes one set of column
buffers per node (validity bitmaps; int32/int64/float/double values; offsets and data), which
become Arrow arrays with ``pa.Array.from_buffers``.  Avro's schema resolution is then done on
whole columns: the writer's fields projected to the reader's by name (or the reader field's
aliases), reader-only fields filled with their defaults, promotions (int to long, float, double;
long to float, double; float to double; string and bytes) by Arrow casts.  The rows of each
writer schema are put back in their order with one ``take``.

What a program cannot express (unions other than ``null`` and one type, decimals, recursive
types, arrays of items of no bytes), resolution it does not do (a renamed record, an enum symbol
the reader lacks, a record default), and any malformed value at all: :func:`ColumnDecoder.decode`
returns None and the caller decodes the batch record by record with fastavro, which names each
bad record; so does a process without the compiled module (or with ``ODRADEK_PURE_PYTHON=1``).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from odradek.errors import OdradekError
from odradek.records.speedups import PURE_PYTHON_ENV

try:
    from odradek.spark import _avrocols
except ImportError:  # no compiler at install: the record-by-record path
    _avrocols = None  # type: ignore[assignment]
if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
    _avrocols = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

__all__ = ["AVAILABLE", "ColumnDecoder", "Node", "Unsupported", "compile_schema"]

AVAILABLE = _avrocols is not None

K_NULL, K_BOOL, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_STRING, K_FIXED, K_ENUM, K_RECORD, K_ARRAY, K_MAP = range(13)
_PRIMITIVE = {"null": K_NULL, "boolean": K_BOOL, "int": K_INT, "long": K_LONG, "float": K_FLOAT,
              "double": K_DOUBLE, "bytes": K_BYTES, "string": K_STRING}
_ARROW = {K_NULL: pa.null(), K_BOOL: pa.bool_(), K_INT: pa.int32(), K_LONG: pa.int64(), K_FLOAT: pa.float32(),
          K_DOUBLE: pa.float64(), K_BYTES: pa.binary(), K_STRING: pa.string(), K_FIXED: pa.binary(),
          K_ENUM: pa.string()}
_NODE = struct.Struct("<iiii")
_MAX_DEPTH = 64
#: writer schemas (one call of the compiled decoder each) one batch may mix before it goes the slow way
_MAX_WRITERS = 32


class Unsupported(OdradekError):
    """A schema, or a resolution, the compiled decoder does not do."""


class _Fallback(Exception):
    """This batch goes the record-by-record way (a null where the reader takes none, a cast Arrow refuses)."""


@dataclass
class Node:
    """One node of a compiled schema."""

    kind: int
    nullidx: int = -1
    end: int = 0
    param: int = 0
    name: str = ""  # a named type's full name
    symbols: list[str] = field(default_factory=list)
    #: a record's fields: (name, aliases, node index, has default, default)
    fields: list[tuple[str, list[str], int, bool, Any]] = field(default_factory=list)


def compile_schema(schema: Any) -> list[Node]:
    """The nodes of a (parsed JSON, logical types already plain) Avro schema, in pre-order."""
    nodes: list[Node] = []
    named: dict[str, Any] = {}
    stack: list[str] = []

    def fullname(node: dict[str, Any], ns: str) -> str:
        name = str(node.get("name", ""))
        if "." in name:
            return name
        space = node.get("namespace", ns)
        return f"{space}.{name}" if space else name

    def comp(node: Any, ns: str, nullidx: int, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise Unsupported("nested too deep")
        if isinstance(node, str):
            if node in _PRIMITIVE:
                nodes.append(Node(_PRIMITIVE[node], nullidx, len(nodes) + 1))
                return
            full = node if "." in node or not ns else f"{ns}.{node}"
            target = named.get(full, named.get(node))
            if target is None:
                raise Unsupported(f"unknown type {node}")
            if target[0] in stack:
                raise Unsupported("recursive type")
            comp(target[1], target[2], nullidx, depth + 1)
            return
        if isinstance(node, list):
            others = [i for i, b in enumerate(node) if b != "null"]
            if nullidx != -1 or len(node) != 2 or len(others) != 1 or isinstance(node[others[0]], list):
                raise Unsupported("a union other than null and one type")
            comp(node[others[0]], ns, 1 - others[0], depth + 1)
            return
        if not isinstance(node, dict):
            raise Unsupported(f"schema node {node!r}")
        kind = node.get("type")
        if "logicalType" in node:
            raise Unsupported(f"logical type {node['logicalType']}")
        if kind in ("record", "error", "enum", "fixed"):
            full = fullname(node, ns)
            named[full] = (full, node, full.rpartition(".")[0])
        if kind in ("record", "error"):
            full = fullname(node, ns)
            me = Node(K_RECORD, nullidx, 0, 0, full)
            nodes.append(me)
            stack.append(full)
            child_ns = full.rpartition(".")[0]
            for f in node.get("fields", []):
                aliases = [str(a) for a in f.get("aliases", []) or []]
                me.fields.append((str(f["name"]), aliases, len(nodes), "default" in f, f.get("default")))
                comp(f["type"], child_ns, -1, depth + 1)
            stack.pop()
            me.end = len(nodes)
            return
        if kind == "enum":
            symbols = [str(s) for s in node.get("symbols", [])]
            nodes.append(Node(K_ENUM, nullidx, len(nodes) + 1, len(symbols), fullname(node, ns), symbols))
            return
        if kind == "fixed":
            size = int(node.get("size", -1))
            if not 0 <= size < 2**31:
                raise Unsupported("fixed size")
            nodes.append(Node(K_FIXED, nullidx, len(nodes) + 1, size, fullname(node, ns)))
            return
        if kind in ("array", "map"):
            me = Node(K_ARRAY if kind == "array" else K_MAP, nullidx)
            nodes.append(me)
            if kind == "map":
                nodes.append(Node(K_STRING, -1, len(nodes) + 1))
            child = len(nodes)
            comp(node.get("items" if kind == "array" else "values"), ns, -1, depth + 1)
            if kind == "array" and _zero_bytes(nodes, child):
                # a corrupt count could claim 2**63 items of no bytes: the careful path refuses the schema
                raise Unsupported("array items of zero bytes")
            me.end = len(nodes)
            return
        if isinstance(kind, (str, list, dict)):
            comp(kind, ns, nullidx, depth + 1)
            return
        raise Unsupported(f"type {kind!r}")

    comp(schema, "", -1, 0)
    return nodes


def _zero_bytes(nodes: list[Node], i: int) -> bool:
    """Whether a value of node ``i`` can take no bytes."""
    node = nodes[i]
    if node.nullidx != -1 or node.kind in (K_ARRAY, K_MAP):
        return False
    if node.kind == K_RECORD:
        return all(_zero_bytes(nodes, j) for _, _, j, _, _ in node.fields)
    return node.kind == K_NULL or (node.kind == K_FIXED and node.param == 0)


def _code(nodes: list[Node]) -> bytes:
    return b"".join(_NODE.pack(n.kind, n.nullidx, n.end, n.param) for n in nodes)


def _arrays(nodes: list[Node], cols: list[tuple[int, bytes, bytes, bytes]], i: int = 0) -> pa.Array:
    """The Arrow array of node ``i`` built on the decoder's buffers."""
    node = nodes[i]
    count, validity, values, data = cols[i]
    vbuf = pa.py_buffer(validity)
    if node.kind == K_NULL:
        return pa.nulls(count)
    if node.kind == K_ARRAY:
        items = _arrays(nodes, cols, i + 1)
        t = pa.list_(pa.field("element", items.type))
        return pa.Array.from_buffers(t, count, [vbuf, pa.py_buffer(values)], children=[items])
    if node.kind == K_MAP:
        keys, items = _arrays(nodes, cols, i + 1), _arrays(nodes, cols, i + 2)
        t = pa.map_(pa.string(), pa.field("value", items.type))
        entries = pa.StructArray.from_arrays([keys, items], fields=[t.key_field, t.item_field])
        return pa.Array.from_buffers(t, count, [vbuf, pa.py_buffer(values)], children=[entries])
    if node.kind == K_RECORD:
        children = [_arrays(nodes, cols, j) for _, _, j, _, _ in node.fields]
        t = pa.struct([pa.field(name, c.type) for (name, *_), c in zip(node.fields, children, strict=True)])
        return pa.Array.from_buffers(t, count, [vbuf], children=children)
    if node.kind == K_ENUM:
        indices = pa.Array.from_buffers(pa.int32(), count, [vbuf, pa.py_buffer(values)])
        return pa.array(node.symbols, pa.string()).take(indices)
    t = _ARROW[node.kind]
    if node.kind in (K_BYTES, K_STRING, K_FIXED):
        return pa.Array.from_buffers(t, count, [vbuf, pa.py_buffer(values), pa.py_buffer(data)])
    return pa.Array.from_buffers(t, count, [vbuf, pa.py_buffer(values)])


_PROMOTE = {
    (K_INT, K_LONG): [pa.int64()],
    (K_INT, K_FLOAT): [pa.float64(), pa.float32()],
    (K_LONG, K_FLOAT): [pa.float64(), pa.float32()],
    (K_INT, K_DOUBLE): [pa.float64()],
    (K_LONG, K_DOUBLE): [pa.float64()],
    (K_FLOAT, K_DOUBLE): [pa.float64()],
    (K_STRING, K_BYTES): [pa.binary()],
    (K_BYTES, K_STRING): [pa.string()],
}


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def check_resolution(writer: list[Node], reader: list[Node], w: int = 0, r: int = 0) -> None:
    """Unsupported unless the writer's node resolves to the reader's column-wise."""
    wn, rn = writer[w], reader[r]
    if rn.kind == K_RECORD:
        if wn.kind != K_RECORD or _short(wn.name) != _short(rn.name):  # fastavro: unqualified names
            raise Unsupported("record names differ")
        for name, default, j, found in _matches(wn, rn):
            if found is not None:
                check_resolution(writer, reader, found, j)
            elif default is not None and (reader[j].kind in (K_RECORD, K_NULL)
                                          or (reader[j].kind == K_ENUM and default not in reader[j].symbols)):
                raise Unsupported(f"field {name}: a default of a record, or not one of its type")
            elif reader[j].kind in (K_BYTES, K_FIXED) and isinstance(default, str) and not default.isascii():
                # Avro's spec reads the code points as bytes, fastavro's values (the careful path)
                # as UTF-8: the careful path, so that every batch of a query reads them alike
                raise Unsupported(f"field {name}: a bytes default past ASCII")
        return
    if rn.kind in (K_ARRAY, K_MAP):
        if wn.kind != rn.kind:
            raise Unsupported("array or map of another type")
        check_resolution(writer, reader, w + 1, r + 1)
        if rn.kind == K_MAP:
            check_resolution(writer, reader, w + 2, r + 2)
        return
    if rn.kind == K_ENUM:
        if wn.kind != K_ENUM or _short(wn.name) != _short(rn.name) or not set(wn.symbols) <= set(rn.symbols):
            raise Unsupported("enum")
        return
    if rn.kind == K_FIXED:
        if wn.kind != K_FIXED or _short(wn.name) != _short(rn.name) or wn.param != rn.param:
            raise Unsupported("fixed")
        return
    if wn.kind != rn.kind and (wn.kind, rn.kind) not in _PROMOTE:
        raise Unsupported(f"no promotion from kind {wn.kind} to {rn.kind}")


def _matches(wn: Node, rn: Node) -> list[tuple[str, Any, int, int | None]]:
    """Each reader field's ``(name, default, node, writer node or None)``, matched as fastavro
    matches them: by name, else by one of the reader field's aliases."""
    by_name = {name: j for name, _, j, _, _ in wn.fields}
    reader_names = {name for name, *_ in rn.fields}
    out: list[tuple[str, Any, int, int | None]] = []
    for name, aliases, j, has_default, default in rn.fields:
        found = by_name.get(name)
        if found is None:
            hits = [by_name[a] for a in aliases if a in by_name and a not in reader_names]
            if len(hits) > 1 or any(a in reader_names for a in aliases):
                raise Unsupported(f"field {name}: aliases")
            found = hits[0] if hits else None
        if found is None and not has_default:
            raise Unsupported(f"field {name}: no default")
        out.append((name, default, j, found))
    return out


def _physical(nodes: list[Node], i: int) -> pa.DataType:
    node = nodes[i]
    if node.kind == K_ARRAY:
        return pa.list_(pa.field("element", _physical(nodes, i + 1)))
    if node.kind == K_MAP:
        return pa.map_(pa.string(), pa.field("value", _physical(nodes, i + 2)))
    if node.kind == K_RECORD:
        return pa.struct([pa.field(name, _physical(nodes, j)) for name, _, j, _, _ in node.fields])
    return _ARROW[node.kind]


def _constant(nodes: list[Node], i: int, default: Any, count: int) -> pa.Array:
    node = nodes[i]
    t = _physical(nodes, i)
    if default is None:  # the column's fields all take nulls, as fastavro's None
        return pa.nulls(count, t)
    if node.kind in (K_RECORD, K_NULL) or (node.kind == K_ENUM and default not in node.symbols):
        raise _Fallback(f"default {default!r}")
    if node.kind in (K_BYTES, K_FIXED) and isinstance(default, str):
        default = default.encode("latin-1")
    if node.kind == K_MAP and isinstance(default, dict):
        default = list(default.items())
    try:
        return pa.repeat(pa.scalar(default, t), count)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise _Fallback(f"default {default!r}: {exc}") from None


def _project(writer: list[Node], reader: list[Node], arr: pa.Array, w: int = 0, r: int = 0) -> pa.Array:
    """The writer's column as the reader's (``check_resolution`` passed)."""
    wn, rn = writer[w], reader[r]
    if rn.nullidx == -1 and rn.kind != K_NULL and arr.null_count:
        raise _Fallback("a null where the reader's schema takes none")
    if rn.kind == K_RECORD:
        position = {j: i for i, (_, _, j, _, _) in enumerate(wn.fields)}
        children, fields = [], []
        for name, default, j, found in _matches(wn, rn):
            if found is not None:
                child = _project(writer, reader, arr.field(position[found]), found, j)
            else:
                child = _constant(reader, j, default, len(arr))
            children.append(child)
            fields.append(pa.field(name, child.type))
        return _struct(children, fields, arr)
    if rn.kind in (K_ARRAY, K_MAP):
        if rn.kind == K_ARRAY:
            inner = arr.values
            new = _project(writer, reader, inner, w + 1, r + 1)
            child, t = new, pa.list_(pa.field("element", new.type))
        else:
            inner = arr.items
            new = _project(writer, reader, inner, w + 2, r + 2)
            t = pa.map_(pa.string(), pa.field("value", new.type))
            child = pa.StructArray.from_arrays([arr.keys, new], fields=[t.key_field, t.item_field])
        if new is inner:
            return arr
        validity, offsets = arr.buffers()[:2]
        return pa.Array.from_buffers(t, len(arr), [validity, offsets], offset=arr.offset, children=[child])
    steps = _PROMOTE.get((wn.kind, rn.kind), [])
    try:
        for t in steps:
            arr = arr.cast(t, safe=False) if t != pa.string() else arr.cast(t)
    except (pa.ArrowException, ValueError) as exc:
        raise _Fallback(f"promotion: {exc}") from None
    return arr


def _struct(children: list[pa.Array], fields: list[pa.Field], like: pa.Array) -> pa.StructArray:
    """A struct of these children, null where ``like`` is."""
    mask = like.is_null() if like.null_count else None
    if children:
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    # a struct of no fields: its length is not its children's
    rows: list[dict[str, Any] | None] = [None if m else {} for m in mask.to_pylist()] if mask is not None else [{}] * len(like)
    return pa.array(rows, pa.struct([]))


def _cast(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """The physical column as the reader's Arrow type (dates and timestamps of their numbers)."""
    if arr.type == target:
        return arr
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type) and arr.type.num_fields == target.num_fields:
        flat = arr if arr.offset == 0 else pa.concat_arrays([arr])
        children = [_cast(flat.field(i), target.field(i).type) for i in range(target.num_fields)]
        return _struct(children, list(target), flat)
    try:
        return arr.cast(target)
    except (pa.ArrowException, ValueError) as exc:
        raise _Fallback(f"cast to {target}: {exc}") from None


@dataclass
class _Writer:
    nodes: list[Node]
    code: bytes


class ColumnDecoder:
    """Decodes a binary column of framed values against one reader schema.

    ``reader``: the reader's schema (parsed JSON, logical types plain); ``reader_id`` its id;
    ``built``: the Arrow type the column is built as (``_typed``'s converter); ``target``: the type
    Spark takes (timestamps in microseconds); ``writer_of``: the writer schema (parsed, plain) of
    an id, raising when the registry has no Avro schema of it.
    """

    def __init__(self, reader: Any, reader_id: int, built: pa.DataType, target: pa.DataType,
                 writer_of: Callable[[int], Any]) -> None:
        self.reader_id = reader_id
        self.built = built
        self.target = target
        self.writer_of = writer_of
        self.writers: dict[bytes, _Writer | None] = {}
        try:
            self.reader: list[Node] | None = compile_schema(reader)
        except Unsupported as exc:
            log.debug("typed Avro: reader schema id %s decoded record by record (%s)", reader_id, exc)
            self.reader = None

    def _writer(self, header: bytes) -> _Writer | None:
        if header in self.writers:
            return self.writers[header]
        found = None
        sid = int.from_bytes(header[1:5], "big")
        if self.reader is not None:
            try:
                nodes = self.reader if sid == self.reader_id else compile_schema(self.writer_of(sid))
                check_resolution(nodes, self.reader)
                found = _Writer(nodes, _code(nodes))
            except Unsupported as exc:
                log.debug("typed Avro: writer schema id %s decoded record by record (%s)", sid, exc)
            except Exception as exc:  # the registry's refusal: the careful path reports it per record
                log.debug("typed Avro: writer schema id %s not compiled: %s", sid, exc)
                return None  # not cached: the registry may answer next time
        self.writers[header] = found
        return found

    def decode(self, column: pa.Array) -> pa.Array | None:
        """The column decoded as ``target``, or None: decode it record by record instead."""
        if _avrocols is None or self.reader is None or column.type != pa.binary() or len(column) == 0:
            return None
        n = len(column)
        validity, offsets, data = column.buffers()
        present = column.drop_null() if column.null_count else column
        if len(present) == 0:
            return pa.nulls(n, self.target)
        header: bytes | None = present[0].as_py()[:5]
        take = bytearray(b"\xff" * (4 * (column.offset + n)))
        parts: list[pa.Array] = []
        base = 0
        try:
            while header is not None:
                if len(parts) >= _MAX_WRITERS or len(header) < 5 or header[0] != 0:
                    return None
                writer = self._writer(header)
                if writer is None:
                    return None
                result = _avrocols.decode(writer.code, header, offsets, data if data is not None else b"", validity,
                                          column.offset, n, take, base)
                if result is None:
                    return None
                count, header, cols = result
                arr = _arrays(writer.nodes, cols)
                if writer.nodes is not self.reader:
                    arr = _project(writer.nodes, self.reader, arr)
                if not pa.types.is_struct(arr.type):  # spark-avro: a primitive top-level schema is a struct of one field
                    arr = pa.StructArray.from_arrays([arr], names=["value"])
                parts.append(_cast(arr, self.built))
                base += count
        except _Fallback as exc:
            log.debug("typed Avro: batch decoded record by record (%s)", exc)
            return None
        if len(parts) == 1 and column.null_count == 0:
            out = parts[0]
        else:
            indices = pa.Array.from_buffers(pa.int32(), n, [validity, pa.py_buffer(take)], offset=column.offset)
            out = pc.take(parts[0] if len(parts) == 1 else pa.concat_arrays(parts), indices)
        try:
            return out if out.type == self.target else out.cast(self.target)
        except (pa.ArrowException, ValueError) as exc:  # a millisecond timestamp past microseconds' range
            log.debug("typed Avro: batch decoded record by record (%s)", exc)
            return None
