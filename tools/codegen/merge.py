"""Merge Kafka's JSON message definitions across Kafka versions into one definition per message.

Kafka 4 dropped old versions of many messages (KIP-896) and renamed or dropped fields that only
those versions carried; Odradek still serves the classic range.  ``merge(old, new)`` builds one
definition that covers every version either defines, each encoded as its defining side says:

* the versions ``new`` defines come from ``new``; the versions only ``old`` defines (``old_only``)
  from ``old``;
* fields are matched by name (recursively in structs, ``commonStructs`` by name); a field's
  versions, nullable versions and tagged versions become ``old``'s restricted to ``old_only``
  united with ``new``'s restricted to ``new``'s versions; a field only one side has keeps that
  side's versions restricted the same way (and disappears when nothing is left);
* the fields keep both sides' orders (a field only ``old`` has comes right after the field that
  precedes it in ``old``);
* what cannot be told apart by version in one class (a field's type, tag, default, ``ignorable``,
  its struct's name) must agree between the sides wherever both contribute: a conflict stops the
  generator with a message naming it.

Requests and responses are matched by API key (Kafka 4 renamed ListClientMetricsResources to
ListConfigResources) and take the newer name.  A definition with ``"validVersions": "none"`` (an
API Kafka removed) leaves the older one as it is.

Kafka 4 numbers coordinator record keys differently: each ``coordinator-key`` definition has
``"validVersions": "0"`` and an ``apiKey`` (the record type written before the key), where
Kafka 3's definitions used the key's version as the record type (``GroupMetadataKey`` version 2,
``OffsetCommitKey`` 0-1).  The bytes are the same, so a Kafka 4 key is renumbered to version
``apiKey`` before merging: ``GroupMetadataKey`` stays version 2 and a new key such as
``ConsumerGroupMemberMetadataKey`` (apiKey 5) is version 5 — its record type.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from tools.codegen.model import MAX, parse_versions

Interval = tuple[int, int]
#: a set of versions as sorted disjoint intervals
Span = list[Interval]


class MergeError(SystemExit):
    pass


# ---------------------------------------------------------------------------- version sets


def span(spec: Any) -> Span:
    v = parse_versions(spec)
    return [] if v is None else [v]


def intersect(a: Span, b: Span) -> Span:
    out: Span = []
    for lo1, hi1 in a:
        for lo2, hi2 in b:
            lo, hi = max(lo1, lo2), min(hi1, hi2)
            if lo <= hi:
                out.append((lo, hi))
    return normalize(out)


def union(a: Span, b: Span) -> Span:
    return normalize([*a, *b])


def minus(a: Span, b: Span) -> Span:
    out: Span = []
    for lo, hi in a:
        pieces = [(lo, hi)]
        for blo, bhi in b:
            nxt: Span = []
            for plo, phi in pieces:
                if bhi < plo or blo > phi:
                    nxt.append((plo, phi))
                    continue
                if plo < blo:
                    nxt.append((plo, blo - 1))
                if bhi < phi:
                    nxt.append((bhi + 1, phi))
            pieces = nxt
        out += pieces
    return normalize(out)


def normalize(s: Span) -> Span:
    out: Span = []
    for lo, hi in sorted(s):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def spec_of(s: Span, where: str, what: str, fill: Span | None = None) -> str | None:
    """The JSON version spec of ``s`` (``None`` when empty); gaps are allowed only where they lie
    inside ``fill`` (versions where the property does not matter), and are filled."""
    if not s:
        return None
    if len(s) > 1:
        if fill is None:
            raise MergeError(f"codegen: {where}: {what} would not be one range: {s}")
        for (_lo1, hi1), (lo2, _hi2) in itertools.pairwise(s):
            gap = [(hi1 + 1, lo2 - 1)]
            if intersect(gap, fill) != gap:
                raise MergeError(f"codegen: {where}: {what} would not be one range: {s}")
        s = [(s[0][0], s[-1][1])]
    lo, hi = s[0]
    if hi >= MAX:
        return f"{lo}+"
    return str(lo) if lo == hi else f"{lo}-{hi}"


# ---------------------------------------------------------------------------- definitions


def key_of(spec: dict[str, Any]) -> tuple[str, Any]:
    """What identifies a definition across Kafka versions."""
    if spec["type"] in ("request", "response"):
        return spec["type"], int(spec["apiKey"])
    return "name", spec["name"]


def renumber_coordinator_key(spec: dict[str, Any]) -> dict[str, Any]:
    """A Kafka 4 ``coordinator-key`` definition numbered as Kafka 3 numbered keys: version = apiKey."""
    if spec.get("type") != "coordinator-key":
        return spec
    k = int(spec["apiKey"])
    if spec["validVersions"] != "0":
        raise MergeError(f"codegen: {spec['name']}: a coordinator key with versions {spec['validVersions']}")
    out = copy.deepcopy(spec)
    out["validVersions"] = str(k)

    def shift(fields: list[dict[str, Any]]) -> None:
        for f in fields:
            for attr in ("versions", "nullableVersions", "taggedVersions"):
                v = parse_versions(f.get(attr))
                if v is not None:
                    lo, hi = v
                    f[attr] = f"{lo + k}+" if hi >= MAX else (str(lo + k) if lo == hi else f"{lo + k}-{hi + k}")
            shift(f.get("fields", []))

    shift(out["fields"])
    for c in out.get("commonStructs", []):
        shift(c["fields"])
    return out


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """One definition covering the versions of both (see the module's docstring)."""
    if parse_versions(new.get("validVersions")) is None:
        return old
    old_valid, new_valid = span(old["validVersions"]), span(new["validVersions"])
    old_only = minus(old_valid, new_valid)
    if not old_only:
        return new
    name = new["name"]
    merged = copy.deepcopy(new)
    valid = union(old_valid, new_valid)
    merged["validVersions"] = spec_of(valid, name, "validVersions")
    # flexible versions: old's in old_only, new's in new's versions
    old_flex = intersect(span(old.get("flexibleVersions")), old_only)
    new_flex = intersect(span(new.get("flexibleVersions")), [(new_valid[0][0], MAX)])
    flex = spec_of(union(old_flex, new_flex), name, "flexibleVersions")
    merged["flexibleVersions"] = flex if flex is not None else "none"
    ctx = _Ctx(name, old_only, new_valid, valid)
    merged["fields"] = ctx.fields(name, old["fields"], new["fields"])
    old_common = {c["name"]: c for c in old.get("commonStructs", [])}
    new_common = {c["name"]: c for c in new.get("commonStructs", [])}
    commons = []
    for cname in _order(name, list(old_common), list(new_common)):
        a, b = old_common.get(cname), new_common.get(cname)
        c = copy.deepcopy(b if b is not None else a)
        assert c is not None
        c["fields"] = ctx.fields(f"{name}.{cname}", a["fields"] if a else [], b["fields"] if b else [])
        if "versions" in c:
            c["versions"] = ctx.versions(f"{name}.{cname}", a, b, "versions") or c["versions"]
        commons.append(c)
    if commons:
        merged["commonStructs"] = commons
    return merged


def _order(where: str, old: list[str], new: list[str]) -> list[str]:
    """``new``'s names with ``old``'s others inserted after their predecessor in ``old``;
    the names both have must be in the same order."""
    common_old = [n for n in old if n in new]
    common_new = [n for n in new if n in old]
    if common_old != common_new:
        raise MergeError(f"codegen: {where}: fields in different orders: {common_old} vs {common_new}")
    out: list[str] = []
    pending = list(old)
    for n in new:
        if n in old:
            while pending and pending[0] != n:
                out.append(pending.pop(0))
            pending.pop(0)
        out.append(n)
    return out + pending


class _Ctx:
    def __init__(self, name: str, old_only: Span, new_valid: Span, valid: Span) -> None:
        self.name = name
        self.old_only = old_only
        # new's side: from new's lowest version up (a new field's "0+" counts from there)
        self.new_side: Span = [(new_valid[0][0], MAX)]
        self.new_valid = new_valid
        self.valid = valid

    def side(self, f: dict[str, Any] | None, attr: str, restrict: Span) -> Span:
        if f is None:
            return []
        v = f.get(attr)
        if attr == "versions" and v is None:
            v = f.get("taggedVersions")
        return intersect(span(v), restrict)

    def versions(self, where: str, a: dict[str, Any] | None, b: dict[str, Any] | None, attr: str,
                 fill: Span | None = None) -> str | None:
        s = union(self.side(a, attr, self.old_only), self.side(b, attr, self.new_side))
        return spec_of(s, where, attr, fill)

    def fields(self, where: str, old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
        old_by = {f["name"]: f for f in old}
        new_by = {f["name"]: f for f in new}
        out = []
        for fname in _order(where, [f["name"] for f in old], [f["name"] for f in new]):
            f = self.field(f"{where}.{fname}", old_by.get(fname), new_by.get(fname))
            if f is not None:
                out.append(f)
        return out

    def field(self, where: str, a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
        a_part = self.side(a, "versions", self.old_only)
        b_part = self.side(b, "versions", self.new_side)
        if not a_part:
            a = None
        if not b_part:
            b = None
        if a is None and b is None:
            return None
        base = b if b is not None else a
        assert base is not None
        f = copy.deepcopy(base)
        f.pop("fields", None)
        present = union(a_part, b_part)
        if a is not None and b is not None:
            self.agree(where, a, b)
            # ``ignorable`` matters where the field is absent: each side's rule in its versions
            absent_old = minus(self.old_only, present)
            absent_new = minus(self.new_valid, present)
            ia, ib = bool(a.get("ignorable")), bool(b.get("ignorable"))
            if ia != ib and absent_old and absent_new:
                raise MergeError(f"codegen: {where}: ignorable differs between Kafka versions where it is absent")
            if (ib if absent_new else ia):
                f["ignorable"] = True
            else:
                f.pop("ignorable", None)
        versions = spec_of(present, where, "versions")
        if "versions" in base or (a is not None and "versions" in a):
            f["versions"] = versions
        for attr in ("nullableVersions", "taggedVersions"):
            spec = self.versions(where, a, b, attr, fill=minus(self.valid, present))
            if spec is None:
                f.pop(attr, None)
            else:
                f[attr] = spec
        if "taggedVersions" in f:
            tag = (b if b is not None and "tag" in b else a or {}).get("tag")
            f["tag"] = tag
        if "fields" in base or (a is not None and "fields" in a):
            f["fields"] = self.fields(where, (a or {}).get("fields", []), (b or {}).get("fields", []))
        return f

    def agree(self, where: str, a: dict[str, Any], b: dict[str, Any]) -> None:
        for attr in ("type", "default", "flexibleVersions"):
            if a.get(attr) != b.get(attr) and not (attr == "default" and _same_default(a, b)):
                raise MergeError(f"codegen: {where}: {attr} differs between Kafka versions: {a.get(attr)!r} vs {b.get(attr)!r}")
        if "tag" in a and "tag" in b and a["tag"] != b["tag"]:
            raise MergeError(f"codegen: {where}: tag differs between Kafka versions: {a['tag']} vs {b['tag']}")


def _same_default(a: dict[str, Any], b: dict[str, Any]) -> bool:
    da, db = a.get("default"), b.get("default")
    if da is None or db is None:
        return False
    try:
        return int(str(da), 0) == int(str(db), 0)
    except ValueError:
        return str(da).lower() == str(db).lower()
