"""Emit the table that lets the protocol layer read a request's topic count before decoding it.

For every request version whose top-level array of topics comes after fields of fixed or
simple (string, bytes) types only, the table gives the types of those fields: skipping them
reaches the array's count in a few operations, whatever the rest of the request holds.
"""

from __future__ import annotations

from tools.codegen.model import FieldDef, MessageDef

#: what a topic array's elements say about the topic
TOPIC_FIELDS = ("topicName",)
SIMPLE = {"int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "bool", "uuid", "string", "bytes", "records"}


def names_topics(f: FieldDef, version: int) -> bool:
    """Whether array field ``f`` lists topics at ``version`` (by name or by id)."""
    if f.struct is None:
        return f.entity_type in TOPIC_FIELDS
    return any(
        g.present(version) and not g.is_tagged(version) and (g.entity_type in TOPIC_FIELDS or g.name == "TopicId")
        for g in f.struct.fields
    )


def prefix(msg: MessageDef, version: int) -> tuple[str, ...] | None:
    """The types of the top-level fields before the topic array at ``version``, or ``None`` when
    the request has no topic array there or one that other arrays or structs come before."""
    assert msg.top is not None
    before: list[str] = []
    for f in msg.top.fields:
        if not f.present(version) or f.is_tagged(version):
            continue
        if f.is_array:
            return tuple(before) if names_topics(f, version) else None
        if f.type not in SIMPLE:
            return None
        before.append(f.type)
    return None


def table_text(header: str, requests: list[MessageDef]) -> str:
    lines = [
        header + '"""Where each request\'s top-level topic array is: the types of the fields before it, by version."""',
        "",
        "from __future__ import annotations",
        "",
        '__all__ = ["TOPIC_ARRAYS"]',
        "",
        "#: api key -> ((first version, last version, flexible, types of the top-level fields before",
        "#: the topic array), ...) for the versions whose topic array is reached by skipping fields",
        "#: of fixed or simple types (see odradek.protocol.inspection)",
        "TOPIC_ARRAYS: dict[int, tuple[tuple[int, int, bool, tuple[str, ...]], ...]] = {",
    ]
    for msg in requests:
        groups: list[tuple[int, int, bool, tuple[str, ...]]] = []
        for v in msg.versions:
            p = prefix(msg, v)
            if p is None:
                continue
            flexible = msg.is_flexible(v)
            if groups and groups[-1][1] == v - 1 and groups[-1][2:] == (flexible, p):
                groups[-1] = (groups[-1][0], v, flexible, p)
            else:
                groups.append((v, v, flexible, p))
        if groups:
            lines.append(f"    {int(msg.spec['apiKey'])}: {tuple(groups)!r},  # {msg.name}")
    lines.append("}")
    return "\n".join(lines) + "\n"
