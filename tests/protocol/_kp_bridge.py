"""Bridge between Odradek's generated messages and kafka-python's (3.x) generated messages.

kafka-python builds its protocol classes at import time from its own copy of Kafka's JSON
message definitions (``kafka.protocol.*``, all subclasses of ``ApiMessage``).  This module

* finds every kafka-python request/response class (:func:`kp_classes`);
* compares, for one version, the wire layout kafka-python derives from its JSON with the one
  Odradek's generated ``_fields_`` describe (:func:`schema_diff`), so that only versions whose
  layouts agree are compared byte for byte;
* builds Odradek values with hypothesis from ``_fields_`` (:func:`message_strategy`);
* converts values both ways (:func:`to_kp`, :func:`from_kp`).

kafka-python conventions the conversion has to bridge (all value-level, not wire-level):

* a ``uuid`` equal to all zeroes is ``None`` in kafka-python;
* a few ``int32`` "authorized operations" fields are patched into a ``bitfield`` type (a set
  of bit numbers, ``None`` for ``-2**31``) and some of them renamed to ``authorized_operations``;
* a tagged struct field left at its default is ``None`` in kafka-python (Odradek, like Kafka's
  Java classes, uses a default-constructed struct), and kafka-python writes a struct inside a
  tagged field with an empty tagged-field section, so nested tagged fields there stay default.
"""

from __future__ import annotations

import importlib
import pkgutil
import uuid
from functools import cache
from typing import Any

from hypothesis import strategies as st

from odradek.protocol import _schema as s
from odradek.protocol._schema import Array, Field, Message, Struct
from odradek.protocol.messages import API_MODULES, request_class, response_class

INT_RANGES: dict[Any, tuple[int, int]] = {
    s.INT8: (-(2**7), 2**7 - 1),
    s.INT16: (-(2**15), 2**15 - 1),
    s.UINT16: (0, 2**16 - 1),
    s.INT32: (-(2**31), 2**31 - 1),
    s.UINT32: (0, 2**32 - 1),
    s.INT64: (-(2**63), 2**63 - 1),
}

_BITFIELD_NULL = -(2**31)  # kafka-python's ``None`` bitfield: only bit 31 set


def _in(version: int, versions: tuple[int, int] | None) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


# --------------------------------------------------------------------------------------------
# kafka-python discovery


@cache
def kp_classes() -> dict[tuple[int, str], type]:
    """Every kafka-python request/response message class, keyed by ``(api key, "request"|"response")``.

    kafka-python has no public registry of requests (``ResponseClassRegistry`` only holds
    responses), so import every module of :mod:`kafka.protocol` (except the legacy
    hand-written ``kafka.protocol.old`` package and the stub generator) and walk the subclasses
    of ``ApiMessage``; ``ApiMessage[version]`` creates per-version subclasses, which are skipped.
    """
    import kafka.protocol
    from kafka.protocol.api_message import ApiMessage

    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" in info.name or info.name.endswith("generate_stubs"):
            continue
        importlib.import_module(info.name)

    found: dict[tuple[int, str], type] = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue
        key = (cls.API_KEY, cls.type)
        assert found.get(key, cls) is cls, f"two kafka-python classes for {key}"
        found[key] = cls
    return dict(sorted(found.items()))


@cache
def kp_data_classes() -> dict[str, type]:
    """kafka-python's versioned non-message structs (``ApiData``, e.g. ConsumerProtocolAssignment) by name."""
    from kafka.protocol.api_data import ApiData

    kp_classes()  # imports every module
    found: dict[str, type] = {}
    stack = list(ApiData.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        # kafka.coordinator.assignors.sticky has StickyAssignorUserData, kafka-python's own
        # schema (not one of Kafka's): only kafka.protocol's classes come from Kafka's JSON
        if not cls.__module__.startswith("kafka.protocol."):
            continue
        if getattr(cls, "_json", None) is not None and cls._json.get("type") == "data":
            found[cls.__name__] = cls
    return dict(sorted(found.items()))


def odradek_class(api_key: int, kind: str) -> type[Message] | None:
    if api_key not in API_MODULES:
        return None
    return request_class(api_key) if kind == "request" else response_class(api_key)


# --------------------------------------------------------------------------------------------
# field matching and schema comparison


def _kp_struct_of(kp_field: Any) -> Any:
    """The kafka-python StructField describing the elements of a struct or struct-array field."""
    return kp_field.array_of if kp_field.is_struct_array() else kp_field


#: Fields renamed in Kafka's JSON between Odradek's copy (Kafka 4.x's names) and kafka-python's,
#: wire layout unchanged: (Odradek struct qualname, Odradek attr) -> kafka-python name.  KIP-848
#: renamed TxnOffsetCommit's GenerationId to GenerationIdOrMemberEpoch.
RENAMES: dict[tuple[str, str], str] = {
    ("TxnOffsetCommitRequest", "generation_id_or_member_epoch"): "generation_id",
}


def kp_field_for(kp_struct: Any, f: Field, owner: type[Struct]) -> Any | None:
    """kafka-python's field for Odradek's field ``f`` of ``owner`` (same snake_case name, or a known rename)."""
    fields = kp_struct.fields
    kpf = fields.get(RENAMES.get((owner.__qualname__, f.attr), f.attr))
    if kpf is not None:
        return kpf
    # kafka-python json_patch renames cluster_/topic_authorized_operations (into bitfields)
    if f.attr.endswith("authorized_operations"):
        kpf = fields.get("authorized_operations")
        if kpf is not None and kpf.type_str == "bitfield":
            return kpf
    return None


def _is_bitfield(kpf: Any) -> bool:
    return kpf is not None and not kpf.is_array() and not kpf.is_struct() and kpf.type_str == "bitfield"


def _odr_type_name(t: Any) -> str:
    if isinstance(t, Array):
        return "[]" + _odr_type_name(t.element)
    if isinstance(t, type) and issubclass(t, Struct):
        return "struct"
    return t.name


def _kp_type_name(kpf: Any) -> str:
    if kpf.is_struct_array():
        return "[]struct"
    if kpf.is_array():
        return "[]" + _kp_type_name(kpf.array_of)
    if kpf.is_struct():
        return "struct"
    return "int32" if kpf.type_str == "bitfield" else kpf.type_str


def _struct_element(t: Any) -> type[Struct] | None:
    if isinstance(t, Array):
        t = t.element
    return t if isinstance(t, type) and issubclass(t, Struct) else None


def _norm_default(value: Any) -> Any:
    if isinstance(value, uuid.UUID) and value == s.ZERO_UUID:
        return None
    return value


def schema_diff(
    odr_cls: type[Struct], kp_struct: Any, version: int, flexible: bool, path: str = ""
) -> list[str]:
    """Differences between the two wire layouts of a struct at ``version`` (empty when they agree)."""
    diffs: list[str] = []
    path = path or odr_cls.__qualname__
    odr_fields = [f for f in odr_cls._fields_ if _in(version, f.versions)]
    kp_fields = [kf for kf in kp_struct._fields if kf.for_version_q(version)]
    matched: set[str] = set()
    for f in odr_fields:
        where = f"{path}.{f.attr}"
        kpf = kp_field_for(kp_struct, f, odr_cls)
        if kpf is None or not kpf.for_version_q(version):
            diffs.append(f"{where}: only in Odradek's schema at v{version}")
            continue
        matched.add(kpf.name)
        if _odr_type_name(f.type) != _kp_type_name(kpf):
            diffs.append(f"{where}: type {_odr_type_name(f.type)} vs {_kp_type_name(kpf)}")
            continue
        odr_tagged = f.tag is not None and _in(version, f.tagged)
        kp_tagged = kpf.tagged_field_q(version)
        if (f.tag if odr_tagged else None) != (kpf.tag if kp_tagged else None):
            diffs.append(f"{where}: tag {f.tag if odr_tagged else None} vs {kpf.tag if kp_tagged else None}")
        if _in(version, f.nullable) != kpf.nullable_for_version_q(version):
            diffs.append(
                f"{where}: nullable {_in(version, f.nullable)} vs {kpf.nullable_for_version_q(version)}"
            )
        if flexible and not f.flexible:
            # kafka-python ignores a field's own "flexibleVersions" outside the request header
            diffs.append(f"{where}: flexibleVersions none (kafka-python encodes it compact)")
        if odr_tagged and kp_tagged and flexible:
            comparable_default = f.default is not s._FRESH and not _is_bitfield(kpf)
            if comparable_default and _norm_default(f.default) != _norm_default(kpf.default):
                diffs.append(f"{where}: tagged default {f.default!r} vs {kpf.default!r}")
            elem = _struct_element(f.type)
            if elem is not None and _has_tagged(elem, version):
                diffs.append(f"{where}: tagged struct with nested tagged fields (kafka-python drops them)")
        elem = _struct_element(f.type)
        if elem is not None:
            diffs.extend(schema_diff(elem, _kp_struct_of(kpf), version, flexible, where))
    for kf in kp_fields:
        if kf.name not in matched:
            diffs.append(f"{path}.{kf.name}: only in kafka-python's schema at v{version}")
    return diffs


def _has_tagged(cls: type[Struct], version: int) -> bool:
    return any(
        f.tag is not None and _in(version, f.versions) and _in(version, f.tagged) for f in cls._fields_
    )


def kp_tag_order_diff(kp_struct: Any, version: int, path: str) -> list[str]:
    """kafka-python writes tagged fields in declaration order; Kafka requires increasing tags."""
    out = []
    tags = [kf.tag for kf in kp_struct._fields if kf.for_version_q(version) and kf.tagged_field_q(version)]
    if tags != sorted(tags):
        out.append(f"{path}: tagged fields declared out of tag order {tags}")
    for kf in kp_struct._fields:
        if kf.for_version_q(version) and (kf.is_struct() or kf.is_struct_array()):
            out.extend(kp_tag_order_diff(_kp_struct_of(kf), version, f"{path}.{kf.name}"))
    return out


def compare_version(odr_cls: type[Message], kp_cls: Any, version: int) -> list[str]:
    """Reasons Odradek and kafka-python disagree on ``version`` of a message (empty: comparable)."""
    flexible = odr_cls.is_flexible(version)
    if flexible != kp_cls.flexible_version_q(version):
        return [f"flexible: {flexible} vs {kp_cls.flexible_version_q(version)}"]
    diffs = schema_diff(odr_cls, kp_cls._struct, version, flexible)
    if flexible:
        diffs += kp_tag_order_diff(kp_cls._struct, version, odr_cls.__qualname__)
    return diffs


# --------------------------------------------------------------------------------------------
# value conversion


def _to_kp_value(value: Any, t: Any, kpf: Any, version: int, flexible: bool) -> Any:
    if value is None:
        return None
    if isinstance(t, Array):
        elem_kpf = _kp_struct_of(kpf) if kpf.is_struct_array() else kpf.array_of
        return [_to_kp_value(v, t.element, elem_kpf, version, flexible) for v in value]
    if isinstance(t, type) and issubclass(t, Struct):
        return to_kp(value, _kp_struct_of(kpf), version, flexible)
    if t is s.UUID:
        return None if value == s.ZERO_UUID else value
    if t in (s.BYTES, s.RECORDS):
        return bytes(value)
    if _is_bitfield(kpf):
        bits = {b for b in range(32) if (value & 0xFFFFFFFF) >> b & 1}
        return None if bits == {31} else bits
    return value


def to_kp(obj: Struct, kp_struct: Any, version: int, flexible: bool, kp_cls: Any = None) -> Any:
    """The kafka-python object equal to Odradek's ``obj`` at ``version`` (fields of that version only)."""
    kwargs: dict[str, Any] = {}
    for f in type(obj)._fields_:
        if not _in(version, f.versions):
            continue
        tagged = f.tag is not None and _in(version, f.tagged)
        if tagged and not flexible:
            continue
        kpf = kp_field_for(kp_struct, f, type(obj))
        assert kpf is not None, f"no kafka-python field for {type(obj).__qualname__}.{f.attr}"
        value = getattr(obj, f.attr)
        if tagged and _struct_element(f.type) is not None and value == f.default_value():
            value = kpf.default  # kafka-python's "not set" for a tagged struct/array of structs
        else:
            value = _to_kp_value(value, f.type, kpf, version, flexible)
        kwargs[kpf.name] = value
    cls = kp_cls if kp_cls is not None else kp_struct.data_class
    return cls(version=version, **kwargs)


def _from_kp_value(value: Any, f: Field, t: Any, kpf: Any, version: int, flexible: bool) -> Any:
    if _is_bitfield(kpf):
        if value is None:
            return _BITFIELD_NULL
        raw = sum(1 << b for b in value)
        return raw - (1 << 32) if raw >= 1 << 31 else raw
    if value is None:
        if t is s.UUID:
            return s.ZERO_UUID
        return None
    if isinstance(t, Array):
        elem_kpf = _kp_struct_of(kpf) if kpf.is_struct_array() else kpf.array_of
        return [_from_kp_value(v, f, t.element, elem_kpf, version, flexible) for v in value]
    if isinstance(t, type) and issubclass(t, Struct):
        return from_kp(value, t, _kp_struct_of(kpf), version, flexible)
    return value


def from_kp(kobj: Any, odr_cls: type[Struct], kp_struct: Any, version: int, flexible: bool) -> Any:
    """The Odradek object equal to kafka-python's ``kobj`` (a decoded message or struct)."""
    kwargs: dict[str, Any] = {}
    for f in odr_cls._fields_:
        if not _in(version, f.versions):
            continue
        tagged = f.tag is not None and _in(version, f.tagged)
        if tagged and not flexible:
            continue
        kpf = kp_field_for(kp_struct, f, odr_cls)
        assert kpf is not None
        value = getattr(kobj, kpf.name)
        if value is None and tagged and _struct_element(f.type) is not None and not _in(version, f.nullable):
            kwargs[f.attr] = f.default_value()
        else:
            kwargs[f.attr] = _from_kp_value(value, f, f.type, kpf, version, flexible)
    return odr_cls(**kwargs)


# --------------------------------------------------------------------------------------------
# value generation (hypothesis), driven by Odradek's schema


def _value_strategy(
    t: Any, version: int, flexible: bool, nullable: bool, in_tag: bool
) -> st.SearchStrategy[Any]:
    if isinstance(t, Array):
        items = st.lists(_value_strategy(t.element, version, flexible, False, in_tag), max_size=3)
        return st.one_of(st.none(), items) if nullable else items
    if isinstance(t, type) and issubclass(t, Struct):
        strat = struct_strategy(t, version, flexible, in_tag)
        return st.one_of(st.none(), strat) if nullable else strat
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.integers(lo, hi)
    if t is s.BOOL:
        return st.booleans()
    if t is s.FLOAT64:
        return st.floats(allow_nan=False)
    if t is s.UUID:
        return st.one_of(st.just(s.ZERO_UUID), st.builds(uuid.UUID, int=st.integers(1, 2**128 - 1)))
    if t is s.STRING:
        v: st.SearchStrategy[Any] = st.one_of(st.just(""), st.text(max_size=10), st.just("Odradek-ü-雪-🚀"))
    elif t in (s.BYTES, s.RECORDS):
        v = st.binary(max_size=24)
    else:
        raise AssertionError(f"no strategy for {t!r}")
    return st.one_of(st.none(), v) if nullable else v


@cache
def struct_strategy(
    cls: type[Struct], version: int, flexible: bool, in_tag: bool = False
) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` with every field of ``version`` drawn; other fields stay default.

    Tagged fields are sometimes left at their default (then not written).  Inside a tagged
    field (``in_tag``) nested tagged fields stay default: kafka-python writes such structs with
    an empty tagged-field section.
    """
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in cls._fields_:
        if not _in(version, f.versions):
            continue
        nullable = _in(version, f.nullable)
        if f.tag is not None and _in(version, f.tagged):
            if not flexible or in_tag:
                continue
            value = _value_strategy(f.type, version, True, nullable, True)
            kwargs[f.attr] = st.one_of(st.builds(f.default_value), value)
        else:
            kwargs[f.attr] = _value_strategy(f.type, version, flexible and f.flexible, nullable, in_tag)
    return st.fixed_dictionaries(kwargs).map(lambda kw: cls(**kw))


def message_strategy(cls: type[Message], version: int) -> st.SearchStrategy[Any]:
    return struct_strategy(cls, version, cls.is_flexible(version))


def kp_decode(kp_cls: Any, data: bytes, version: int, header: bool = False) -> Any:
    """kafka-python's decode of a body (or header + body) at ``version``.

    ``ApiVersionsResponse.decode`` re-reads any body whose error code is non-zero as version 0
    (the client-side half of KIP-511's fallback); that is a client policy, not the codec, so the
    generic ``ApiMessage.decode`` is used for it instead.
    """
    from kafka.protocol.api_message import ApiMessage

    if kp_cls.__name__ == "ApiVersionsResponse":
        return ApiMessage.decode.__func__(kp_cls, data, version=version, header=header)
    return kp_cls.decode(data, version=version, header=header)
