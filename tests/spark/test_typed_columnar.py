"""The compiled column-wise Avro decoder of typed reads (odradek.spark._avrofast / _avrocols).

Differential: over generated writer schemas (records, nested records, arrays, maps, nullable
unions, enums, fixed, every primitive, dates and timestamps) and records, and over generated schema evolutions
(fields dropped, added with defaults, promoted; arrays and maps), the compiled decoder gives the same Arrow
column as the record-by-record fastavro path.  Hostile: random bytes and random truncations of
valid values never crash it and never over-read; whatever it accepts, fastavro accepts too and
decodes the same.
"""

from __future__ import annotations

import io
import json
import math
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from odradek.spark import _avrofast, _typed
from odradek.spark._typed import TypedColumn, TypedOptions, apply_typed, arrow_type_of

_compiled = pytest.mark.skipif(not _avrofast.AVAILABLE, reason="the compiled decoder is not built")

_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)


# --- schemas and values ------------------------------------------------------------------------

_LEAVES = st.sampled_from([
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    {"type": "int", "logicalType": "date"},
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "long", "logicalType": "local-timestamp-millis"},
    ("enum",), ("fixed",),
])


def _shapes() -> st.SearchStrategy[Any]:
    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.tuples(st.just("nullable"), inner, st.booleans()),
            st.tuples(st.just("record"), st.lists(inner, max_size=4)),
            st.tuples(st.sampled_from(["array", "map"]), inner),
        )

    return st.recursive(_LEAVES, extend, max_leaves=8)


class _Names:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def _schema(shape: Any, names: _Names, data: st.DataObject) -> Any:
    if isinstance(shape, (str, dict)):
        return shape
    kind = shape[0]
    if kind in ("array", "map"):
        inner = _schema(shape[1], names, data)
        if kind == "array" and inner == "null":  # items of no bytes: refused by both paths
            inner = "int"
        return {"type": kind, "items" if kind == "array" else "values": inner}
    if kind == "enum":
        count = data.draw(st.integers(1, 4))
        return {"type": "enum", "name": names("E"), "symbols": [f"S{i}" for i in range(count)]}
    if kind == "fixed":
        return {"type": "fixed", "name": names("F"), "size": data.draw(st.integers(0, 6))}
    if kind == "nullable":
        inner = _schema(shape[1], names, data)
        if inner == "null":
            inner = "long"
        if isinstance(inner, list):  # Avro has no union of a union
            return inner
        return ["null", inner] if shape[2] else [inner, "null"]
    return {"type": "record", "name": names("R"),
            "fields": [{"name": f"f{i}", "type": _schema(s, names, data)} for i, s in enumerate(shape[1])]}


def _top(data: st.DataObject) -> Any:
    names = _Names()
    fields = data.draw(st.lists(_shapes(), min_size=1, max_size=5))
    return {"type": "record", "name": "Top", "namespace": "t",
            "fields": [{"name": f"f{i}", "type": _schema(s, names, data)} for i, s in enumerate(fields)]}


def _value(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        other = next(b for b in schema if b != "null")
        return st.one_of(st.none(), _value(other))
    if isinstance(schema, dict):
        kind = schema["type"]
        if schema.get("logicalType"):
            return _value(kind)  # the plain number (the test writes with the plain schema)
        if kind == "enum":
            return st.sampled_from(schema["symbols"])
        if kind == "fixed":
            return st.binary(min_size=schema["size"], max_size=schema["size"])
        if kind == "record":
            return st.fixed_dictionaries({f["name"]: _value(f["type"]) for f in schema["fields"]})
        if kind == "array":
            return st.lists(_value(schema["items"]), max_size=3)
        if kind == "map":
            return st.dictionaries(st.text(max_size=3), _value(schema["values"]), max_size=3)
        return _value(kind)
    return {
        "null": st.none(), "boolean": st.booleans(), "int": _INT32, "long": _INT64,
        "float": st.floats(width=32, allow_nan=False), "double": st.floats(allow_nan=False),
        "bytes": st.binary(max_size=8), "string": st.text(max_size=8),
    }[schema]


def _framed(schema_id: int, schema: Any, value: Any) -> bytes:
    import fastavro

    buf = io.BytesIO()
    buf.write(b"\x00" + struct.pack(">I", schema_id))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(_typed._plain(schema)), value)
    return buf.getvalue()


_URLS = iter(range(10**9))


@contextmanager
def _registry(schemas: dict[int, Any]) -> Iterator[str]:
    """The registry's answers by id; a fresh URL, so that no cache of another example answers."""
    original = _typed.RegistryClient.by_id

    def by_id(self: Any, i: int, **kw: Any) -> tuple[str, str]:
        if i not in schemas:
            raise _typed.SchemaMappingError(f"schema registry: HTTP 404 Schema {i} not found")
        return "AVRO", json.dumps(schemas[i])

    _typed.RegistryClient.by_id = by_id  # type: ignore[method-assign,assignment]
    try:
        yield f"http://test-columnar-{next(_URLS)}"
    finally:
        _typed.RegistryClient.by_id = original  # type: ignore[method-assign]


def _column(url: str, schema_id: int, schema: Any) -> TypedColumn:
    text = json.dumps(schema)
    return TypedColumn("value", "avro", "t", "t-value", url, None, schema_id, "AVRO", text, arrow_type_of("AVRO", text))


def _batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": pa.nulls(n, pa.binary()), "value": pa.array(values, pa.binary()),
        "offset": pa.array(range(100, 100 + n), pa.int64()),
    })


def _both(col: TypedColumn, values: list[bytes | None], mode: str = "PERMISSIVE") -> tuple[pa.RecordBatch | None, Any]:
    """The compiled decoder's column (None when it declined the batch) and the record-by-record
    path's batch (or its MalformedRecordError)."""
    column = _batch(values).column("value")
    built = _typed._decoder(col)[2]
    fast = _typed._columnar(col, built).decode(column)
    saved = _avrofast._avrocols
    _avrofast._avrocols = None  # type: ignore[assignment]
    try:
        slow: Any = apply_typed(_batch(values), (col,), TypedOptions(value_format="avro", mode=mode), 0)
    except _typed.MalformedRecordError as exc:
        slow = exc
    except pa.ArrowInvalid:  # the careful path's own limit (a field of type null in a record in an array)
        slow = None
    finally:
        _avrofast._avrocols = saved
    return fast, slow


# --- the tests ---------------------------------------------------------------------------------


@_compiled
@given(st.data())
def test_compiled_decoder_agrees_with_fastavro_on_generated_schemas(data: st.DataObject) -> None:
    schema = _top(data)
    values: list[bytes | None] = [
        None if v is None else _framed(5, schema, v)
        for v in data.draw(st.lists(st.one_of(st.none(), _value(schema)), min_size=1, max_size=6))
    ]
    with _registry({5: schema}) as url:
        col = _column(url, 5, schema)
        fast, slow = _both(col, values)
    assume(slow is not None)
    assert not isinstance(slow, Exception)
    if slow.column("_corrupt_record").null_count != len(values):
        assert fast is None  # a millisecond timestamp past the range of microseconds: a corrupt record
        return
    try:
        _avrofast.compile_schema(_typed._plain(schema))
    except _avrofast.Unsupported:  # an array of items of no bytes (an empty record): both paths refuse it
        assert fast is None
        return
    assert fast is not None, "the compiled decoder declined a batch of valid values of a schema it compiles"
    assert fast.equals(slow.column("value")), (fast, slow.column("value"))


_PROMOTIONS = {"int": ["long", "float", "double"], "long": ["float", "double"], "float": ["double"],
               "string": ["bytes"], "bytes": ["string"]}
_DEFAULTS = [("long", 7), ("string", "d"), ("double", 1.5), ("boolean", True), ("bytes", "\u00ff"),
             (["null", "string"], None), (["null", "long"], None)]


def _evolve(writer: Any, data: st.DataObject) -> Any:
    fields = []
    for f in writer["fields"]:
        action = data.draw(st.sampled_from(["keep", "drop", "promote"]))
        if action == "drop":
            continue
        t = f["type"]
        if action == "promote" and isinstance(t, str) and t in _PROMOTIONS:
            t = data.draw(st.sampled_from(_PROMOTIONS[t]))
        elif action == "promote" and isinstance(t, dict) and t["type"] == "enum":  # symbols reordered, one more or less
            symbols = [*reversed(t["symbols"]), "Z"]
            t = {**t, "symbols": symbols[1:] if data.draw(st.booleans()) else symbols}
        fields.append({**f, "type": t})
    for i in range(data.draw(st.integers(0, 2))):
        t, default = data.draw(st.sampled_from(_DEFAULTS))
        fields.insert(data.draw(st.integers(0, len(fields))), {"name": f"new{i}", "type": t, "default": default})
    return {**writer, "fields": fields}


@_compiled
@given(st.data())
def test_compiled_decoder_resolves_older_writers_as_fastavro_does(data: st.DataObject) -> None:
    writer = _top(data)
    reader = _evolve(writer, data)
    drawn = data.draw(st.lists(st.tuples(st.booleans(), st.integers(0, 2**32)), min_size=1, max_size=6))
    values: list[bytes | None] = []
    for old, seed in drawn:
        schema, sid = (writer, 1) if old else (reader, 2)
        values.append(_framed(sid, schema, data.draw(_value(schema))) if seed % 7 else None)
    with _registry({1: writer, 2: reader}) as url:
        col = _column(url, 2, reader)
        fast, slow = _both(col, values)
    assume(slow is not None)
    if isinstance(slow, Exception) or slow.column("_corrupt_record").null_count != len(values):
        assert fast is None  # fastavro refuses a value (bytes promoted to a string that is not UTF-8)
        return
    if fast is not None:
        assert fast.equals(slow.column("value")), (fast, slow.column("value"))


@_compiled
def test_two_writer_schemas_and_nulls_keep_their_rows_in_order() -> None:
    """Nine in ten records of the latest schema, one in ten of the older one (resolved with the
    default), null values between: one compiled pass per writer schema and one take."""
    v1 = {"type": "record", "name": "Payment", "namespace": "bench", "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}},
    ]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}
    values: list[bytes | None] = []
    for i in range(50):
        row = {"id": i, "amount": i / 4, "at": 1_700_000_000_000 + i, "state": "PAID" if i % 3 else "NEW",
               "coupon": f"c{i}" if i % 2 else None}
        values.append(None if i % 11 == 5 else _framed(1, v1, row) if i % 10 == 0 else _framed(2, v2, row))
    with _registry({1: v1, 2: v2}) as url:
        col = _column(url, 2, v2)
        fast, slow = _both(col, values)
        assert fast is not None and fast.equals(slow.column("value"))
        rows = fast.to_pylist()
        assert rows[5] is None and rows[10] == {
            "id": 10, "amount": 2.5, "at": rows[10]["at"], "state": "PAID", "coupon": None}
        assert rows[11]["coupon"] == "c11" and rows[10]["at"].timestamp() == 1_700_000_000.010
        # a slice of the column (an Arrow offset) reads the same rows
        column = _batch(values).column("value").slice(3, 30)
        sliced = _typed._columnar(col, _typed._decoder(col)[2]).decode(column)
        assert sliced is not None and sliced.equals(fast.slice(3, 30))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, dict):  # an Arrow map: its (key, value) pairs
        a = dict(a)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)



@_compiled
@given(st.data())
def test_random_bytes_and_truncations_never_crash_the_compiled_decoder(data: st.DataObject) -> None:
    """Whatever the bytes: the decoder declines the batch, or every value it decodes is one
    fastavro decodes the same (and leaves no byte over)."""
    import fastavro

    schema = _typed._plain(_top(data))
    parsed = fastavro.parse_schema(schema)
    good = [_framed(5, schema, v) for v in data.draw(st.lists(_value(schema), min_size=1, max_size=3))]
    values: list[bytes | None] = []
    for _ in range(data.draw(st.integers(1, 6))):
        how = data.draw(st.sampled_from(["random", "truncated", "flipped", "good", "null"]))
        base = data.draw(st.sampled_from(good))
        if how == "random":
            values.append(b"\x00\x00\x00\x00\x05" + data.draw(st.binary(max_size=30)))
        elif how == "truncated":
            values.append(base[: data.draw(st.integers(0, len(base)))])
        elif how == "flipped" and len(base) > 5:
            i = data.draw(st.integers(5, len(base) - 1))
            values.append(base[:i] + bytes([data.draw(st.integers(0, 255))]) + base[i + 1:])
        else:
            values.append(None if how == "null" else base)
    try:
        nodes = _avrofast.compile_schema(schema)
    except _avrofast.Unsupported:
        return
    built = _typed._avro_arrow(schema)[0]
    decoder = _avrofast.ColumnDecoder(schema, 5, built, built, lambda sid: schema)
    column = pa.array(values, pa.binary())
    out = decoder.decode(column)
    assert nodes  # the schema compiles
    if out is None:
        return
    rows = out.to_pylist() if not _has_dates(out.type) else None
    for i, raw in enumerate(values):
        if raw is None:
            assert not out[i].is_valid
            continue
        buf = io.BytesIO(raw)
        buf.seek(5)
        expected = fastavro.schemaless_reader(buf, parsed, None)
        assert buf.tell() == len(raw), "the compiled decoder took a value with bytes left over"
        if rows is not None:
            assert _same(rows[i], expected), (rows[i], expected)


def _has_dates(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return any(_has_dates(f.type) for f in t)
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


@_compiled
def test_hostile_varints_and_lengths_are_declined() -> None:
    """A varint of eleven bytes, a negative or too-long length, an enum or union index out of
    range, an int out of range, invalid UTF-8, bytes left over: the batch is declined (the
    careful path then names the record)."""
    schema = {"type": "record", "name": "H", "fields": [
        {"name": "n", "type": "int"},
        {"name": "s", "type": ["null", "string"]},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
    ]}
    built = _typed._avro_arrow(schema)[0]
    decoder = _avrofast.ColumnDecoder(schema, 5, built, built, lambda sid: schema)
    head = b"\x00\x00\x00\x00\x05"
    ok = head + b"\x02" + b"\x02\x04hi" + b"\x02"
    assert decoder.decode(pa.array([ok], pa.binary())) is not None
    for bad in [
        head + b"\xff" * 11 + b"\x00\x00\x00",  # a varint of more than ten bytes
        head + b"\xfe\xff\xff\xff\x1f" + b"\x00\x00",  # 2**31 - 1 + 1: past an int
        head + b"\x02" + b"\x02\x03hi" + b"\x02",  # a negative length
        head + b"\x02" + b"\x02\xfe\xff\xff\xff\x0fhi" + b"\x02",  # a length past the end
        head + b"\x02" + b"\x04" + b"\x02",  # union index 2
        head + b"\x02" + b"\x00" + b"\x04",  # enum index 2
        head + b"\x02" + b"\x02\x04\xed\xa0" + b"\x02",  # a surrogate in UTF-8
        ok + b"\x00",  # a byte left over
        ok[:-1],  # truncated
        b"\x01\x00\x00\x00\x05" + ok[5:],  # no magic byte
    ]:
        assert decoder.decode(pa.array([ok, bad], pa.binary())) is None, bad


def test_schemas_it_cannot_express_go_record_by_record() -> None:
    for schema in [
        {"type": "record", "name": "A", "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]},
        {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]},
        {"type": "record", "name": "N", "fields": [{"name": "n", "type": ["null", "N"]}]},
        {"type": "record", "name": "D", "fields": [
            {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}}]},
    ]:
        with pytest.raises(_avrofast.Unsupported):
            _avrofast.compile_schema(schema)


def test_a_millisecond_timestamp_past_the_range_of_microseconds_is_a_corrupt_record() -> None:
    """2**62 milliseconds fit a long but not Spark's microseconds: that record is corrupt
    (PERMISSIVE) or fails the query naming its offset (FAILFAST), not an Arrow error."""
    schema = {"type": "record", "name": "T", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    values: list[bytes | None] = [_framed(3, schema, {"at": 5}), _framed(3, schema, {"at": 2**62})]
    with _registry({3: schema}) as url:
        col = _column(url, 3, schema)
        out = apply_typed(_batch(values), (col,), TypedOptions(value_format="avro", mode="PERMISSIVE"), 0)
        assert out.column("_corrupt_record").to_pylist() == [None, values[1]]
        assert out.column("value").to_pylist()[0]["at"].timestamp() == 0.005
        with pytest.raises(_typed.MalformedRecordError, match="offset 101"):
            apply_typed(_batch(values), (col,), TypedOptions(value_format="avro"), 0)
