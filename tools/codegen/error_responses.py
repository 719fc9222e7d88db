"""Emit, per API, the answer to a request that failed as a whole: Kafka's ``getErrorResponse``
derived from the request's and the response's schemas.

The response is built from the request, level by level:

* a level of the response with an error code (``ErrorCode``, else a field ending in
  ``ErrorCode``) gets the error there, and its ``ErrorMessage`` the message; nothing below it is
  filled (the top level of a response with a top-level error code is such a level);
* a level without one answers each item the request named: each array of structs of the
  response is matched with an array of the request (same name; else elements naming the same
  kind of entity, e.g. ``entityType: topicName``, looked for one level down too, as
  AlterReplicaLogDirs nests topics in directories; else the one array left on each side, when
  their elements share a field or the response's are only an error), and gets one element per
  item of it;
* an item's identity is copied into its answer: fields of the same name and type (or naming the
  same entity) whose answer field has no default of its own (a default such as ``-1`` means
  "unknown", as Kafka answers offsets and epochs), partition indexes under any of their names,
  and for a request array of plain values (topic names, partition indexes, group ids) the
  value itself; arrays of the same shape under an error level are copied whole (the entities
  of AlterClientQuotas);
* everything else keeps its default.

Kafka departs from these rules in a few places, listed in :data:`KAFKA_CASES` as read in its
``*Request.getErrorResponse``: Produce with ``acks=0`` gets no answer (the broker closes the
connection instead); Fetch v7-12 and ElectLeaders v1+ carry the error per partition too; the
users of AlterUserScramCredentials come from its deletions and upsertions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.codegen.model import MAX, FieldDef, MessageDef, StructDef, default_of, within

#: names Kafka's definitions give a partition's index
PARTITION_NAMES = {"Partition", "PartitionIndex", "PartitionId", "Index"}


@dataclass
class KafkaCase:
    """Where Kafka's ``getErrorResponse`` departs from the derived answer."""

    #: a request field and value for which there is no answer at all
    no_answer_when: tuple[str, int] | None = None
    #: versions whose items get the error too, beside the top-level error code
    items_too: tuple[int, int] | None = None
    #: response array -> (request arrays whose items it answers, in turn; response field -> request field)
    sources: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)


KAFKA_CASES = {
    "Produce": KafkaCase(no_answer_when=("Acks", 0)),
    "Fetch": KafkaCase(items_too=(7, 12)),
    "ElectLeaders": KafkaCase(items_too=(1, MAX)),
    "AlterUserScramCredentials": KafkaCase(sources={"Results": (["Deletions", "Upsertions"], {"User": "Name"})}),
}


def _fields(s: StructDef, version: int) -> list[FieldDef]:
    return [f for f in s.fields if f.present(version)]


def _error_field(s: StructDef, version: int) -> FieldDef | None:
    fields = [f for f in _fields(s, version) if f.type == "int16" and not f.is_array]
    for f in fields:
        if f.name == "ErrorCode":
            return f
    for f in fields:
        if f.name.endswith("ErrorCode"):
            return f
    return None


def _message_field(s: StructDef, version: int) -> FieldDef | None:
    for f in _fields(s, version):
        if f.name == "ErrorMessage" and f.type == "string":
            return f
    return None


def _plain(f: FieldDef) -> bool:
    return not f.is_array and f.struct is None


def _has_own_default(f: FieldDef) -> bool:
    """The field's default is not its type's zero (``-1`` for unknown offsets and epochs...)."""
    expr, literal = default_of(f.owner, f.spec)
    return literal and expr not in ("0", '""', "False", "0.0", "ZERO_UUID", "None", 'b""')


def _same_key(g: FieldDef, h: FieldDef) -> bool:
    """Whether request field ``h`` says what answer field ``g`` holds."""
    if g.type != h.type or not _plain(g) or not _plain(h):
        return False
    if g.entity_type and g.entity_type == h.entity_type:
        return True
    if g.name in PARTITION_NAMES and h.name in PARTITION_NAMES and g.type == "int32":
        return True
    return g.name == h.name and not _has_own_default(g)


def _entities(s: StructDef | None, f: FieldDef, version: int) -> set[str]:
    """Entity types the items of array ``f`` name."""
    if f.struct is None:
        return {f.entity_type} if f.entity_type else set()
    return {g.entity_type for g in _fields(f.struct, version) if _plain(g) and g.entity_type}


class ErrorResponses:
    def __init__(self, request: MessageDef, response: MessageDef, alias: dict[str, str]) -> None:
        self.request = request
        self.response = response
        self.alias = alias  # struct qual -> run-time name
        self.case = KAFKA_CASES.get(request.name[: -len("Request")], KafkaCase())

    def function(self) -> str:
        req, resp = self.request, self.response
        name = f"_error_{req.name}"
        lines = [
            f"def {name}(request: {req.name}, version: int, code: int, message: str | None) -> {resp.name} | None:",
        ]
        if self.case.no_answer_when is not None:
            fname, value = self.case.no_answer_when
            attr = next(f.attr for f in req.top.fields if f.name == fname)  # type: ignore[union-attr]
            lines.append(f"    if request.{attr} == {value}:")
            lines.append("        return None")
        groups: list[tuple[int, int, str]] = []
        for v in req.versions:
            expr = self.top(v)
            if groups and groups[-1][2] == expr and groups[-1][1] == v - 1:
                groups[-1] = (groups[-1][0], v, expr)
            else:
                groups.append((v, v, expr))
        for i, (lo, hi, expr) in enumerate(groups):
            if i == len(groups) - 1:
                lines.append(f"    return {expr}")
            else:
                cond = f"version <= {hi}"
                lines.append(f"    {'if' if i == 0 else 'elif'} {cond}:  # v{lo}-{hi}" if lo != hi else f"    {'if' if i == 0 else 'elif'} {cond}:  # v{lo}")
                lines.append(f"        return {expr}")
        return "\n".join(lines)

    def top(self, version: int) -> str:
        assert self.request.top is not None and self.response.top is not None
        items = self.case.items_too is not None and within(version, self.case.items_too)
        return self.build(self.response.top, version, "request", self.request.top, None, 0, top=True, items_too=items)

    def build(
        self,
        s: StructDef,
        version: int,
        src: str,
        src_struct: StructDef | None,
        src_plain: FieldDef | None,
        depth: int,
        *,
        top: bool = False,
        items_too: bool = False,
    ) -> str:
        """The expression of an answer struct ``s`` to the request item ``src`` (a struct of
        type ``src_struct``, or a plain value of array ``src_plain``)."""
        kwargs: list[str] = []
        err = _error_field(s, version)
        if err is not None:
            kwargs.append(f"{err.attr}=code")
            msg = _message_field(s, version)
            if msg is not None:
                kwargs.append(f"{msg.attr}=message" if within(version, msg.nullable) else f'{msg.attr}=message or ""')
        if not top:
            kwargs += self.keys(s, version, src, src_struct, src_plain, err)
        if err is None or items_too:
            kwargs += self.arrays(s, version, src, src_struct, depth)
        elif src_struct is not None:
            kwargs += self.copies(s, version, src, src_struct, depth)
        return f"{self.alias[s.qual]}({', '.join(kwargs)})"

    def keys(
        self, s: StructDef, version: int, src: str, src_struct: StructDef | None, src_plain: FieldDef | None,
        err: FieldDef | None,
    ) -> list[str]:
        out: list[str] = []
        renames = self._renames()
        for g in _fields(s, version):
            if not _plain(g) or g is err or g.name == "ErrorMessage":
                continue
            if src_plain is not None:  # the item is a plain value: it goes to the first field it can be
                if g.type == src_plain.base and (
                    not src_plain.entity_type or src_plain.entity_type == g.entity_type or g.name in PARTITION_NAMES
                ):
                    out.append(f"{g.attr}={src}")
                    break
                continue
            if src_struct is None:
                continue
            for h in _fields(src_struct, version):
                if renames.get(g.name) == h.name or _same_key(g, h):
                    value = f"{src}.{h.attr}"
                    if within(version, h.nullable) and not within(version, g.nullable):
                        value += ' or ""' if g.type == "string" else ""
                    out.append(f"{g.attr}={value}")
                    break
        return out

    def _renames(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for _sources, renames in self.case.sources.values():
            out.update(renames)
        return out

    def arrays(self, s: StructDef, version: int, src: str, src_struct: StructDef | None, depth: int) -> list[str]:
        """Answers to the request's items, array by array of ``s``."""
        if src_struct is None:
            return []
        answers = [f for f in _fields(s, version) if f.is_array and f.struct is not None and not f.is_tagged(version)]
        asked = [f for f in _fields(src_struct, version) if f.is_array and not f.is_tagged(version)]
        matched: dict[str, list[list[FieldDef]]] = {}
        used: set[str] = set()
        for f in answers:
            special = self.case.sources.get(f.name)
            if special is not None:
                paths = [[h] for h in asked if h.name in special[0]]
                matched[f.attr] = paths
                used.update(h.name for h in asked if h.name in special[0])
                continue
            path = self._match(f, asked, version)
            if path is not None:
                matched[f.attr] = [path]
                used.add(path[0].name)
        left_answers = [f for f in answers if f.attr not in matched]
        left_asked = [h for h in asked if h.name not in used]
        if len(left_answers) == 1 and len(left_asked) == 1 and self._compatible(left_answers[0], left_asked[0], version):
            matched[left_answers[0].attr] = [[left_asked[0]]]
        out = []
        for f in answers:
            found = matched.get(f.attr)
            if not found:
                continue
            assert f.struct is not None
            parts = []
            for path in found:
                clauses, var, last = self._loops(path, src, depth, version)
                item = self.build(
                    f.struct, version, var, last.struct, last if last.struct is None else None, depth + len(path)
                )
                parts.append(f"[{item} {' '.join(clauses)}]")
            out.append(f"{f.attr}={' + '.join(parts)}")
        return out

    def _match(self, f: FieldDef, asked: list[FieldDef], version: int) -> list[FieldDef] | None:
        for h in asked:
            if h.name == f.name:
                return [h]
        assert f.struct is not None
        wanted = {g.entity_type for g in _fields(f.struct, version) if _plain(g) and g.entity_type}
        if not wanted:
            return None
        for h in asked:
            if wanted & _entities(None, h, version):
                return [h]
        for h in asked:  # one level down (AlterReplicaLogDirs: directories, then their topics)
            if h.struct is None:
                continue
            for inner in _fields(h.struct, version):
                if inner.is_array and wanted & _entities(None, inner, version):
                    return [h, inner]
        return None

    def _compatible(self, f: FieldDef, h: FieldDef, version: int) -> bool:
        """Whether the one answer array left may answer the one request array left, item by item."""
        assert f.struct is not None
        plain = [g for g in _fields(f.struct, version) if _plain(g)]
        err, msg = _error_field(f.struct, version), _message_field(f.struct, version)
        if err is not None and all(g is err or g is msg for g in plain):
            return True  # the answer is only an error (CreateAcls, DeleteAcls)
        if h.struct is None:
            return any(g.type == h.base and g is not err for g in plain)
        return any(_same_key(g, k) for g in plain for k in _fields(h.struct, version))

    def _loops(self, path: list[FieldDef], src: str, depth: int, version: int) -> tuple[list[str], str, FieldDef]:
        clauses = []
        owner = src
        var = src
        for i, h in enumerate(path):
            var = f"x{depth + i}"
            items = f"{owner}.{h.attr}"
            if h.nullable is not None:  # null in some version: nothing to answer
                items = f"({items} or ())"
            clauses.append(f"for {var} in {items}")
            owner = var
        return clauses, var, path[-1]

    def copies(self, s: StructDef, version: int, src: str, src_struct: StructDef, depth: int) -> list[str]:
        """Arrays under an error level that the request holds in the same shape: copied."""
        out = []
        for f in _fields(s, version):
            if not f.is_array or f.struct is None or f.is_tagged(version):
                continue
            for h in _fields(src_struct, version):
                if h.name != f.name or h.struct is None or not h.is_array:
                    continue
                mine = [(g.name, g.type) for g in _fields(f.struct, version)]
                theirs = [(k.name, k.type) for k in _fields(h.struct, version)]
                if mine != theirs or not all(_plain(g) for g in _fields(f.struct, version)):
                    continue
                var = f"x{depth}"
                args = ", ".join(f"{g.attr}={var}.{k.attr}" for g, k in zip(_fields(f.struct, version), _fields(h.struct, version), strict=True))
                items = f"{src}.{h.attr}"
                if h.nullable is not None:
                    items = f"({items} or ())"
                out.append(f"{f.attr}=[{self.alias[f.struct.qual]}({args}) for {var} in {items}]")
        return out
