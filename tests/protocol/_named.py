"""Requests that name things: every array holds two items, every value is distinct (so that what an
answer copies can be traced back to the request)."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from odradek.protocol._schema import (
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UUID,
    Array,
    Field,
    Struct,
)


def in_versions(version: int, versions: tuple[int, int] | None) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def _present(f: Field, version: int) -> bool:
    return in_versions(version, f.versions) and not (f.tag is not None and in_versions(version, f.tagged))


class Values:
    """Distinct values, so that what an answer copies can be traced to the request."""

    def __init__(self) -> None:
        self.n = itertools.count(1)

    def of(self, t: Any) -> Any:
        n = next(self.n)
        if t is STRING:
            return f"s{n}"
        if t is UUID:
            return uuid.UUID(int=n)
        if t is BOOL:
            return True
        if t is FLOAT64:
            return float(n)
        if t in (BYTES, RECORDS):
            return b"b%d" % n
        if t is INT8:
            return n % 100
        if t in (INT16, UINT16):
            return n % 30000
        if t is INT64:
            return n * 1000
        return n  # int32 / uint32


def named(cls: type[Struct], version: int, values: Values | None = None, depth: int = 0) -> Any:
    """A ``cls`` at ``version`` whose arrays hold two items each, every value distinct."""
    values = values or Values()
    obj = cls()
    for f in cls._fields_:
        if not _present(f, version):
            continue
        t = f.type
        if isinstance(t, Array):
            if isinstance(t.element, type) and issubclass(t.element, Struct):
                value: Any = [named(t.element, version, values, depth + 1) for _ in range(2)] if depth < 4 else []
            else:
                value = [values.of(t.element) for _ in range(2)]
        elif isinstance(t, type) and issubclass(t, Struct):
            value = named(t, version, values, depth + 1)
        else:
            value = values.of(t)
        setattr(obj, f.attr, value)
    return obj
