"""Hypothesis strategies that build any generated message at any version from its schema."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

from odradek.protocol import _schema as s
from odradek.protocol._schema import Array, Field, Struct

_INT_RANGES = {
    s.INT8: (-(2**7), 2**7 - 1),
    s.INT16: (-(2**15), 2**15 - 1),
    s.UINT16: (0, 2**16 - 1),
    s.INT32: (-(2**31), 2**31 - 1),
    s.UINT32: (0, 2**32 - 1),
    s.INT64: (-(2**63), 2**63 - 1),
}


def _in(version: int, versions: tuple[int, int] | None) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def value_of(t: Any, version: int, flexible: bool, nullable: bool, unknown_from: int = 0) -> st.SearchStrategy[Any]:
    if isinstance(t, Array):
        items = st.lists(value_of(t.element, version, flexible, False, unknown_from), max_size=3)
        return st.one_of(st.none(), items) if nullable else items
    if isinstance(t, type) and issubclass(t, Struct):
        strat = struct_of(t, version, flexible, unknown_from)
        return st.one_of(st.none(), strat) if nullable else strat
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.integers(lo, hi)
    if t is s.BOOL:
        return st.booleans()
    if t is s.FLOAT64:
        return st.floats(allow_nan=False)
    if t is s.UUID:
        return st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
    if t is s.STRING:
        v = st.text(max_size=12)
    elif t is s.BYTES:
        v = st.binary(max_size=24)
    elif t is s.RECORDS:
        v = st.binary(max_size=64)
    else:
        raise AssertionError(f"no strategy for {t!r}")
    return st.one_of(st.none(), v) if nullable else v


def _field_strategy(f: Field, version: int, flexible: bool, unknown_from: int) -> st.SearchStrategy[Any] | None:
    if not _in(version, f.versions):
        return None
    if f.tag is not None and _in(version, f.tagged):
        if not flexible:
            return None
        # tagged fields: sometimes left at their default (then not written at all)
        value = value_of(f.type, version, True, _in(version, f.nullable), unknown_from)
        return st.one_of(st.just(f.default_value()), value)
    return value_of(f.type, version, flexible and f.flexible, _in(version, f.nullable), unknown_from)


def unknown_tags(
    cls: type[Struct], version: int, unknown_from: int = 0
) -> st.SearchStrategy[list[tuple[int, bytes]] | None]:
    """Tagged fields ``cls`` does not know, with tags from ``unknown_from`` up."""
    known = {f.tag for f in cls._fields_ if f.tag is not None}
    tags = st.integers(unknown_from, unknown_from + 300).filter(lambda t: t not in known)
    pairs = st.lists(st.tuples(tags, st.binary(max_size=8)), max_size=2, unique_by=lambda p: p[0])
    return st.one_of(st.none(), pairs.map(lambda p: sorted(p) or None))


def struct_of(cls: type[Struct], version: int, flexible: bool, unknown_from: int = 0) -> st.SearchStrategy[Any]:
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in cls._fields_:
        strat = _field_strategy(f, version, flexible, unknown_from)
        if strat is not None:
            kwargs[f.attr] = strat
    if flexible:
        kwargs["unknown_tagged_fields"] = unknown_tags(cls, version, unknown_from)
    return st.fixed_dictionaries(kwargs).map(lambda kw: cls(**kw))


def message_of(cls: type[s.Data], version: int, unknown_from: int = 0) -> st.SearchStrategy[Any]:
    """Any ``cls`` message at ``version``; unknown tagged fields get tags from ``unknown_from`` up."""
    return struct_of(cls, version, cls.is_flexible(version), unknown_from)
