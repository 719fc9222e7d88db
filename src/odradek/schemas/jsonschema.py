"""JSON Schema (drafts 4, 6, 7, 2019-09 and 2020-12): parsing, canonical form, references and
Confluent's compatibility rules.

A schema is checked against the meta-schema of its draft (``$schema``; draft 7 without one)
with the ``jsonschema`` package, its ``$ref``s resolved (inside the document, through its
``$id``s, or to a referenced schema by the reference's name), and then read into a typed model
the way Confluent's registry reads it (everit's loader): a schema object becomes one of
:class:`StringSchema`, :class:`NumberSchema`, :class:`ObjectSchema`, :class:`ArraySchema`,
:class:`BooleanSchema`, :class:`NullSchema`, :class:`EnumSchema`, :class:`ConstSchema`,
:class:`NotSchema`, :class:`CombinedSchema` (``allOf``/``anyOf``/``oneOf``, a ``type`` array, or
several of the kinds above side by side), :class:`ReferenceSchema`, or the empty, true and false
schemas.  The model is only what compatibility needs.

Compatibility is Confluent's ``SchemaDiff``: the old (writer) schema is compared with the new
(reader) one, every difference gets a type (``PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL``,
``REQUIRED_ATTRIBUTE_ADDED``, ``TYPE_NARROWED``...) and a JSON path, and a difference whose type
is not in :data:`COMPATIBLE_CHANGES` makes the schemas incompatible.  Notable consequences, as
documented by Confluent: with an open content model (no ``additionalProperties``) adding a
property is incompatible and removing one compatible; with a closed one (``"additionalProperties":
false``) it is the other way round; making a property required is incompatible; ``integer`` to
``number`` widens.

The canonical form is the document as compact JSON in its own key order (Confluent's); the
normal form (``normalize=true``) sorts every object's keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from odradek.schemas._common import (
    DIFFERENT_TYPE,
    JSON,
    Incompatibility,
    Reference,
    SchemaError,
    escape,
    loads,
)

__all__ = ["COMPATIBLE_CHANGES", "JsonSchema", "parse_json_schema"]

#: how deep a document may nest (a hostile schema cannot exhaust the stack)
MAX_DEPTH = 200

_DRAFTS = {
    "http://json-schema.org/draft-04/schema": 4,
    "http://json-schema.org/draft-06/schema": 6,
    "http://json-schema.org/draft-07/schema": 7,
    "https://json-schema.org/draft/2019-09/schema": 2019,
    "https://json-schema.org/draft/2020-12/schema": 2020,
}

# -- the model ---------------------------------------------------------------------------------

_ABSENT: Any = object()


@dataclass(eq=False)
class JS:
    #: the canonical JSON of what defined it (sub-schemas of a combination are told apart by it)
    key: str = ""
    id: Any = None
    title: Any = None
    description: Any = None
    default: Any = _ABSENT
    unprocessed: dict[str, Any] = field(default_factory=dict)

    @property
    def has_default(self) -> bool:
        return self.default is not _ABSENT


@dataclass(eq=False)
class EmptySchema(JS):
    pass


@dataclass(eq=False)
class TrueSchema(EmptySchema):
    pass


@dataclass(eq=False)
class FalseSchema(JS):
    pass


@dataclass(eq=False)
class NullSchema(JS):
    pass


@dataclass(eq=False)
class BooleanSchema(JS):
    pass


@dataclass(eq=False)
class StringSchema(JS):
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None


@dataclass(eq=False)
class NumberSchema(JS):
    minimum: Any = None
    maximum: Any = None
    exclusive_minimum: Any = None
    exclusive_maximum: Any = None
    multiple_of: Any = None
    requires_integer: bool = False


@dataclass(eq=False)
class ObjectSchema(JS):
    properties: dict[str, JS] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    permits_additional: bool = True
    additional: JS | None = None
    pattern_properties: dict[str, JS] = field(default_factory=dict)
    property_dependencies: dict[str, frozenset[str]] = field(default_factory=dict)
    schema_dependencies: dict[str, JS] = field(default_factory=dict)
    min_properties: int | None = None
    max_properties: int | None = None
    unevaluated: JS | None = None


@dataclass(eq=False)
class ArraySchema(JS):
    all_items: JS | None = None
    item_schemas: list[JS] | None = None
    permits_additional_items: bool = True
    additional_items: JS | None = None
    min_items: int | None = None
    max_items: int | None = None
    unique_items: bool = False
    min_contains: int | None = None
    max_contains: int | None = None
    unevaluated: JS | None = None


@dataclass(eq=False)
class EnumSchema(JS):
    values: frozenset[str] = frozenset()


@dataclass(eq=False)
class ConstSchema(JS):
    value: str = ""


@dataclass(eq=False)
class CombinedSchema(JS):
    criterion: str = "allOf"
    subschemas: list[JS] = field(default_factory=list)


@dataclass(eq=False)
class NotSchema(JS):
    must_not_match: JS | None = None


@dataclass(eq=False)
class ReferenceSchema(JS):
    ref: str = ""
    resolve: Callable[[], JS] | None = None

    @property
    def referred(self) -> JS:
        assert self.resolve is not None
        return self.resolve()


def _canon(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- loading -----------------------------------------------------------------------------------

_OBJECT_KEYS = ("properties", "required", "minProperties", "maxProperties", "dependencies", "patternProperties",
                "additionalProperties", "propertyNames", "dependentRequired", "dependentSchemas",
                "unevaluatedProperties")
_ARRAY_KEYS = ("items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains", "prefixItems",
               "minContains", "maxContains", "unevaluatedItems")
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
_TYPES = ("string", "number", "integer", "object", "array", "boolean", "null")


class _Document:
    """One JSON document (the schema, or a referenced one) and where its ``$id``s point."""

    def __init__(self, name: str, root: Any) -> None:
        self.name = name
        self.root = root
        self.base = name
        self.anchors: dict[str, Any] = {}  # absolute $id (no fragment) -> node
        if isinstance(root, dict):
            rid = root.get("$id", root.get("id"))
            if isinstance(rid, str):
                self.base = urljoin(name, urldefrag(rid)[0]) if name else urldefrag(rid)[0]
        self._index(root, self.base, 0)

    def _index(self, node: Any, base: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            rid = node.get("$id")
            if isinstance(rid, str) and rid:
                url, frag = urldefrag(rid)
                if url:
                    base = urljoin(base, url) if base else url
                    self.anchors.setdefault(base, node)
                if frag and not frag.startswith("/"):
                    self.anchors.setdefault(f"{base}#{frag}", node)
            anchor = node.get("$anchor")
            if isinstance(anchor, str):
                self.anchors.setdefault(f"{base}#{anchor}", node)
            for k, v in node.items():
                if k in ("enum", "const", "default", "examples"):
                    continue
                self._index(v, base, depth + 1)
        elif isinstance(node, list):
            for v in node:
                self._index(v, base, depth + 1)


def _pointer(node: Any, fragment: str) -> Any:
    if fragment in ("", "/"):
        return node
    if not fragment.startswith("/"):
        raise KeyError(fragment)
    for raw in fragment[1:].split("/"):
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node[part]
        elif isinstance(node, list):
            node = node[int(part)]
        else:
            raise KeyError(fragment)
    return node


class _Loader:
    def __init__(self, root: _Document, refs: dict[str, _Document], draft: int) -> None:
        self.root = root
        self.refs = refs
        self.draft = draft
        self.cache: dict[tuple[int, int], JS] = {}  # (id(document), id(node)) -> model
        #: every reference made (each must resolve to a schema)
        self.references: list[ReferenceSchema] = []

    # -- $ref ----------------------------------------------------------------------------------

    def locate(self, ref: str, doc: _Document, base: str) -> tuple[_Document, Any]:
        url, frag = urldefrag(ref)
        if not url:
            target_doc = doc
            if base != doc.base and base in doc.anchors:
                node = doc.anchors[base]
                return target_doc, self._fragment(target_doc, node, frag, ref)
            return target_doc, self._fragment(target_doc, doc.root, frag, ref)
        candidates = [url, urljoin(base, url) if base else url]
        for cand in candidates:
            if cand in self.refs:
                d = self.refs[cand]
                return d, self._fragment(d, d.root, frag, ref)
            for d in (doc, self.root, *self.refs.values()):
                if cand == d.base:
                    return d, self._fragment(d, d.root, frag, ref)
                if cand in d.anchors:
                    return d, self._fragment(d, d.anchors[cand], frag, ref)
        # a reference named by its last path part ("customer.json" for ".../customer.json")
        tail = url.rsplit("/", 1)[-1]
        for name, d in self.refs.items():
            if name.rsplit("/", 1)[-1] == tail:
                return d, self._fragment(d, d.root, frag, ref)
        raise SchemaError(f"Unresolved $ref '{ref}': not in the schema and not one of its references")

    def _fragment(self, doc: _Document, node: Any, frag: str, ref: str) -> Any:
        if frag and not frag.startswith("/"):
            anchored = doc.anchors.get(f"{doc.base}#{frag}")
            if anchored is None:
                raise SchemaError(f"Unresolved $ref '{ref}': no anchor {frag}")
            return anchored
        try:
            return _pointer(node, frag)
        except (KeyError, IndexError, ValueError, TypeError):
            raise SchemaError(f"Unresolved $ref '{ref}': no such place in the schema") from None

    # -- schemas -------------------------------------------------------------------------------

    def load(self, node: Any, doc: _Document, base: str, depth: int = 0) -> JS:
        if depth > MAX_DEPTH:
            raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels")
        key = (id(doc), id(node))
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        model = self._load(node, doc, base, depth)
        self.cache[key] = model
        return model

    def _load(self, node: Any, doc: _Document, base: str, depth: int) -> JS:
        if node is True:
            return TrueSchema(key="true")
        if node is False:
            return FalseSchema(key="false")
        if not isinstance(node, dict):
            raise SchemaError(f"not a schema: {_dumps(node)[:200]}")
        rid = node.get("$id") if self.draft > 4 else node.get("id")
        if isinstance(rid, str) and urldefrag(rid)[0]:
            base = urljoin(base, urldefrag(rid)[0]) if base else urldefrag(rid)[0]
        key = _canon(node)
        if "$ref" in node and isinstance(node["$ref"], str) and self.draft <= 7:
            out: JS = self._reference(node["$ref"], doc, base, key)
            return out
        parts: list[JS] = []
        if "enum" in node and isinstance(node["enum"], list):
            parts.append(EnumSchema(key=_canon({"enum": node["enum"]}), values=frozenset(_canon(v) for v in node["enum"])))
        for criterion in ("allOf", "anyOf", "oneOf"):
            if criterion in node and isinstance(node[criterion], list):
                subs = [self.load(s, doc, base, depth + 1) for s in node[criterion]]
                parts.append(CombinedSchema(key=_canon({criterion: node[criterion]}), criterion=criterion, subschemas=subs))
        if "not" in node:
            parts.append(NotSchema(key=_canon({"not": node["not"]}), must_not_match=self.load(node["not"], doc, base, depth + 1)))
        if "const" in node and self.draft >= 6:
            parts.append(ConstSchema(key=_canon({"const": node["const"]}), value=_canon(node["const"])))
        if "$ref" in node and isinstance(node["$ref"], str):
            parts.append(self._reference(node["$ref"], doc, base, _canon({"$ref": node["$ref"]})))
        parts.extend(self._typed(node, doc, base, depth))
        if not parts:
            out = EmptySchema(key=key)
        elif len(parts) == 1:
            out = parts[0]
            out.key = key
        else:
            out = CombinedSchema(key=key, criterion="allOf", subschemas=parts)
        out.id = rid
        out.title = node.get("title")
        out.description = node.get("description")
        out.default = node.get("default", _ABSENT)
        out.unprocessed = {k: v for k, v in node.items() if k == "connect.type"}
        return out

    def _reference(self, ref: str, doc: _Document, base: str, key: str) -> ReferenceSchema:
        target_doc, target = self.locate(ref, doc, base)
        target_base = target_doc.base

        def resolve(target_doc: _Document = target_doc, target: Any = target) -> JS:
            return self.load(target, target_doc, target_base)

        out = ReferenceSchema(key=key, ref=ref, resolve=resolve)
        self.references.append(out)
        return out

    def _typed(self, node: dict[str, Any], doc: _Document, base: str, depth: int) -> list[JS]:
        kind = node.get("type")
        if isinstance(kind, str):
            return [self._explicit(kind, node, doc, base, depth)] if kind in _TYPES else []
        if isinstance(kind, list):
            subs = [self._explicit(k, node, doc, base, depth) for k in kind if isinstance(k, str) and k in _TYPES]
            return [CombinedSchema(key=_canon({"type": kind}), criterion="anyOf", subschemas=subs)]
        out: list[JS] = []
        if any(k in node for k in _OBJECT_KEYS):
            out.append(self._object(node, doc, base, depth))
        if any(k in node for k in _ARRAY_KEYS):
            out.append(self._array(node, doc, base, depth))
        if any(k in node for k in _NUMBER_KEYS):
            out.append(self._number(node, False))
        if any(k in node for k in _STRING_KEYS):
            out.append(self._string(node))
        return out

    def _explicit(self, kind: str, node: dict[str, Any], doc: _Document, base: str, depth: int) -> JS:
        if kind == "string":
            return self._string(node)
        if kind in ("number", "integer"):
            return self._number(node, kind == "integer")
        if kind == "object":
            return self._object(node, doc, base, depth)
        if kind == "array":
            return self._array(node, doc, base, depth)
        if kind == "boolean":
            return BooleanSchema(key=_canon({"type": "boolean"}))
        return NullSchema(key=_canon({"type": "null"}))

    def _string(self, node: dict[str, Any]) -> StringSchema:
        pattern = node.get("pattern")
        return StringSchema(
            key=_canon({"type": "string", **{k: node[k] for k in _STRING_KEYS if k in node}}),
            min_length=_int(node.get("minLength")),
            max_length=_int(node.get("maxLength")),
            pattern=pattern if isinstance(pattern, str) else None,
        )

    def _number(self, node: dict[str, Any], integer: bool) -> NumberSchema:
        excl_min = node.get("exclusiveMinimum")
        excl_max = node.get("exclusiveMaximum")
        return NumberSchema(
            key=_canon({"type": "integer" if integer else "number", **{k: node[k] for k in _NUMBER_KEYS if k in node}}),
            minimum=_num(node.get("minimum")),
            maximum=_num(node.get("maximum")),
            exclusive_minimum=_num(excl_min) if self.draft > 4 else None,
            exclusive_maximum=_num(excl_max) if self.draft > 4 else None,
            multiple_of=_num(node.get("multipleOf")),
            requires_integer=integer,
        )

    def _object(self, node: dict[str, Any], doc: _Document, base: str, depth: int) -> ObjectSchema:
        out = ObjectSchema(key=_canon({"type": "object", **{k: node[k] for k in _OBJECT_KEYS if k in node}}))
        props = node.get("properties")
        if isinstance(props, dict):
            out.properties = {k: self.load(v, doc, base, depth + 1) for k, v in props.items()}
        required = node.get("required")
        if isinstance(required, list):
            out.required = [r for r in required if isinstance(r, str)]
        additional = node.get("additionalProperties", _ABSENT)
        if additional is False:
            out.permits_additional = False
        elif isinstance(additional, dict):
            out.additional = self.load(additional, doc, base, depth + 1)
        patterns = node.get("patternProperties")
        if isinstance(patterns, dict):
            out.pattern_properties = {k: self.load(v, doc, base, depth + 1) for k, v in patterns.items()}
        deps: dict[str, Any] = {}
        for name in ("dependencies", "dependentRequired", "dependentSchemas"):
            value = node.get(name)
            if isinstance(value, dict):
                deps.update(value)
        for k, v in deps.items():
            if isinstance(v, list):
                out.property_dependencies[k] = frozenset(x for x in v if isinstance(x, str))
            elif isinstance(v, (dict, bool)):
                out.schema_dependencies[k] = self.load(v, doc, base, depth + 1)
        out.min_properties = _int(node.get("minProperties"))
        out.max_properties = _int(node.get("maxProperties"))
        if "unevaluatedProperties" in node:
            out.unevaluated = self.load(node["unevaluatedProperties"], doc, base, depth + 1)
        return out

    def _array(self, node: dict[str, Any], doc: _Document, base: str, depth: int) -> ArraySchema:
        out = ArraySchema(key=_canon({"type": "array", **{k: node[k] for k in _ARRAY_KEYS if k in node}}))
        items = node.get("items", _ABSENT)
        prefix = node.get("prefixItems")
        if isinstance(prefix, list):  # 2020-12: prefixItems, then items for the rest
            out.item_schemas = [self.load(s, doc, base, depth + 1) for s in prefix]
            if items is False:
                out.permits_additional_items = False
            elif isinstance(items, dict):
                out.additional_items = self.load(items, doc, base, depth + 1)
        elif isinstance(items, list):
            out.item_schemas = [self.load(s, doc, base, depth + 1) for s in items]
            extra = node.get("additionalItems", _ABSENT)
            if extra is False:
                out.permits_additional_items = False
            elif isinstance(extra, dict):
                out.additional_items = self.load(extra, doc, base, depth + 1)
        elif items is not _ABSENT:
            out.all_items = self.load(items, doc, base, depth + 1)
        out.min_items = _int(node.get("minItems"))
        out.max_items = _int(node.get("maxItems"))
        out.unique_items = node.get("uniqueItems") is True
        out.min_contains = _int(node.get("minContains"))
        out.max_contains = _int(node.get("maxContains"))
        if "unevaluatedItems" in node:
            out.unevaluated = self.load(node["unevaluatedItems"], doc, base, depth + 1)
        return out


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _num(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


# -- the diff ----------------------------------------------------------------------------------

COMPATIBLE_CHANGES = frozenset({
    "ID_CHANGED", "DESCRIPTION_CHANGED", "TITLE_CHANGED", "DEFAULT_CHANGED", "SCHEMA_REMOVED", "TYPE_EXTENDED",
    "MAX_LENGTH_INCREASED", "MAX_LENGTH_REMOVED", "MIN_LENGTH_DECREASED", "MIN_LENGTH_REMOVED", "PATTERN_REMOVED",
    "MAXIMUM_INCREASED", "MAXIMUM_REMOVED", "MINIMUM_DECREASED", "MINIMUM_REMOVED", "EXCLUSIVE_MAXIMUM_INCREASED",
    "EXCLUSIVE_MAXIMUM_REMOVED", "EXCLUSIVE_MINIMUM_DECREASED", "EXCLUSIVE_MINIMUM_REMOVED", "MULTIPLE_OF_REDUCED",
    "MULTIPLE_OF_REMOVED", "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", "REQUIRED_ATTRIBUTE_REMOVED",
    "DEPENDENCY_ARRAY_NARROWED", "DEPENDENCY_ARRAY_REMOVED", "DEPENDENCY_SCHEMA_REMOVED", "MAX_PROPERTIES_INCREASED",
    "MAX_PROPERTIES_REMOVED", "MIN_PROPERTIES_DECREASED", "MIN_PROPERTIES_REMOVED", "ADDITIONAL_PROPERTIES_ADDED",
    "ADDITIONAL_PROPERTIES_EXTENDED", "UNEVALUATED_PROPERTIES_ADDED", "UNEVALUATED_PROPERTIES_EXTENDED",
    "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "MAX_ITEMS_INCREASED", "MAX_ITEMS_REMOVED",
    "MIN_ITEMS_DECREASED", "MIN_ITEMS_REMOVED", "MAX_CONTAINS_INCREASED", "MAX_CONTAINS_REMOVED",
    "MIN_CONTAINS_DECREASED", "MIN_CONTAINS_REMOVED", "UNIQUE_ITEMS_REMOVED", "ADDITIONAL_ITEMS_ADDED",
    "ADDITIONAL_ITEMS_EXTENDED", "UNEVALUATED_ITEMS_ADDED", "UNEVALUATED_ITEMS_EXTENDED",
    "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
    "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "ENUM_ARRAY_EXTENDED", "COMBINED_TYPE_EXTENDED", "PRODUCT_TYPE_NARROWED", "SUM_TYPE_EXTENDED",
    "NOT_TYPE_NARROWED",
})

_KEYWORD_ADDED_OR_REMOVED = frozenset({
    "MAXIMUM_ADDED", "MINIMUM_ADDED", "EXCLUSIVE_MAXIMUM_ADDED", "EXCLUSIVE_MINIMUM_ADDED", "MULTIPLE_OF_ADDED",
    "MAX_LENGTH_ADDED", "MIN_LENGTH_ADDED", "PATTERN_ADDED", "REQUIRED_ATTRIBUTE_ADDED", "MAX_PROPERTIES_ADDED",
    "MIN_PROPERTIES_ADDED", "DEPENDENCY_ARRAY_ADDED", "DEPENDENCY_SCHEMA_ADDED", "MAX_ITEMS_ADDED", "MIN_ITEMS_ADDED",
    "MAX_CONTAINS_ADDED", "MIN_CONTAINS_ADDED", "UNIQUE_ITEMS_ADDED", "ADDITIONAL_ITEMS_REMOVED",
    "ADDITIONAL_PROPERTIES_REMOVED", "UNEVALUATED_PROPERTIES_REMOVED", "UNEVALUATED_ITEMS_REMOVED",
})
_VALUE_INCREASED = frozenset({"MIN_LENGTH_INCREASED", "MINIMUM_INCREASED", "EXCLUSIVE_MINIMUM_INCREASED",
                              "MIN_PROPERTIES_INCREASED", "MULTIPLE_OF_EXPANDED", "MIN_ITEMS_INCREASED",
                              "MIN_CONTAINS_INCREASED"})
_VALUE_DECREASED = frozenset({"MAX_LENGTH_DECREASED", "MAXIMUM_DECREASED", "MAX_ITEMS_DECREASED",
                              "MAX_CONTAINS_DECREASED", "EXCLUSIVE_MAXIMUM_DECREASED", "MAX_PROPERTIES_DECREASED"})
_TYPE_NARROWED = frozenset({"ADDITIONAL_ITEMS_NARROWED", "ENUM_ARRAY_NARROWED", "SUM_TYPE_NARROWED",
                            "ADDITIONAL_PROPERTIES_NARROWED", "UNEVALUATED_PROPERTIES_NARROWED",
                            "UNEVALUATED_ITEMS_NARROWED"})
_VALUE_CHANGED = frozenset({"PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"})
_TYPE_CHANGED = frozenset({"TYPE_CHANGED", "TYPE_NARROWED", "COMBINED_TYPE_CHANGED", "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
                           "ENUM_ARRAY_CHANGED"})
_TYPE_EXTENDED = frozenset({"DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED",
                            "NOT_TYPE_EXTENDED"})
_ADDED_TO_OPEN = frozenset({"REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                            "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL",
                            "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"})


@dataclass(frozen=True, slots=True)
class Difference:
    type: str
    path: str

    def incompatibility(self) -> Incompatibility:
        return Incompatibility(self.type, _describe(self.type, escape(self.path)), style="json")


def _describe(t: str, p: str) -> str:
    if t in _KEYWORD_ADDED_OR_REMOVED:
        return f"The keyword at path '{p}' in the %s schema is not present in the %s schema"
    if t in _VALUE_INCREASED:
        return f"The value at path '{p}' in the %s schema is more than its value in the %s schema"
    if t in _VALUE_DECREASED:
        return f"The value at path '{p}' in the %s schema is less than its value in the %s schema"
    if t in _VALUE_CHANGED:
        return f"The value at path '{p}' is different between the %s and %s schema"
    if t in _TYPE_NARROWED:
        return f"An array or combined type at path '{p}' has fewer elements in the %s schema than the %s schema"
    if t in _TYPE_EXTENDED:
        return f"An array or combined type at path '{p}' has more elements in the %s schema than the %s schema"
    if t in _TYPE_CHANGED:
        return f"A type at path '{p}' is different between the %s schema and the %s schema"
    if t in _ADDED_TO_OPEN:
        return f"The %s schema has an open content model and has a property or item at path '{p}' which is missing in the %s schema"
    if t == "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":
        return f"The %s schema has an unopen content model and has a required property at path '{p}' which is missing in the %s schema"
    if t in ("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"):
        return f"The %s has a closed content model and is missing a property or item present at path '{p}' in the %s schema"
    if t in ("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
             "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        return (f"A property or item is missing in the %s schema but present at path '{p}' in the %s schema and is "
                "not covered by its partially open content model")
    if t in ("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
             "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        return (f"The %s schema has a property or item at path '{p}' which is missing in the %s schema and is not "
                "covered by its partially open content model")
    return ""


class _Context:
    """Confluent's diff context: the differences found, the JSON path, and a memo of compared
    pairs (recursive schemas compare as compatible while they are being compared)."""

    def __init__(self, memo: dict[tuple[int, int], list[Difference]], in_progress: set[tuple[int, int]],
                 seed: dict[tuple[int, int], list[Difference]], optimism: list[bool]) -> None:
        self.memo = memo
        self.in_progress = in_progress
        self.seed = seed
        self.optimism = optimism
        self.path: list[str] = []
        self.diffs: list[Difference] = []

    def sub(self) -> _Context:
        ctx = _Context(self.memo, self.in_progress, self.seed, self.optimism)
        ctx.path = list(self.path)
        return ctx

    def fresh(self) -> _Context:
        return _Context(self.memo, self.in_progress, self.seed, self.optimism)

    def add(self, t: str, attribute: str | None = None) -> None:
        parts = [*self.path, attribute] if attribute is not None else self.path
        self.diffs.append(Difference(t, "#/" + "/".join(parts)))

    def compatible(self) -> bool:
        return all(d.type in COMPATIBLE_CHANGES for d in self.diffs)

    def enter(self, part: str) -> _Path:
        return _Path(self, part)

    def rebased(self, relative: list[Difference]) -> None:
        if not self.path:
            self.diffs.extend(relative)
            return
        prefix = "#/" + "/".join(self.path)
        for d in relative:
            path = prefix if len(d.path) <= 2 else prefix + "/" + d.path[2:]
            self.diffs.append(Difference(d.type, path))


class _Path:
    def __init__(self, ctx: _Context, part: str) -> None:
        self.ctx = ctx
        self.part = part

    def __enter__(self) -> None:
        self.ctx.path.append(self.part)

    def __exit__(self, *exc: object) -> None:
        self.ctx.path.pop()


def diff(original: JS, update: JS) -> list[Difference]:
    """Every difference from the old schema ``original`` to the new ``update``."""
    seed: dict[tuple[int, int], list[Difference]] = {}
    for _ in range(50):
        memo: dict[tuple[int, int], list[Difference]] = {}
        optimism = [False]
        ctx = _Context(memo, set(), seed, optimism)
        _compare(ctx, original, update)
        incompatible = {k: v for k, v in memo.items() if any(d.type not in COMPATIBLE_CHANGES for d in v)}
        if not optimism[0] or incompatible.keys() == seed.keys():
            return ctx.diffs
        seed = incompatible
    return ctx.diffs


def _deref(s: JS, depth: int = 0) -> JS:
    while isinstance(s, ReferenceSchema):
        depth += 1
        if depth > MAX_DEPTH:
            raise SchemaError("a $ref refers to itself")
        s = s.referred
    return s


def _compare(ctx: _Context, original: JS | None, update: JS | None) -> None:
    if original is None and update is None:
        return
    if original is None:
        ctx.add("SCHEMA_ADDED")
        return
    if update is None:
        ctx.add("SCHEMA_REMOVED")
        return
    o, u = _deref(original), _deref(update)
    key = (id(o), id(u))
    cached = ctx.memo.get(key)
    if cached is None:
        if key in ctx.in_progress:
            seeded = ctx.seed.get(key)
            if seeded is None:
                ctx.optimism[0] = True
                seeded = []
            cached = seeded
        else:
            ctx.in_progress.add(key)
            try:
                sub = ctx.fresh()
                _compare_types(sub, o, u)
                cached = list(sub.diffs)
                ctx.memo[key] = cached
            finally:
                ctx.in_progress.discard(key)
    ctx.rebased(cached)


def _same_kind(a: JS, b: JS) -> bool:
    return type(a) is type(b) or (isinstance(a, CombinedSchema) and isinstance(b, CombinedSchema))


def _compare_types(ctx: _Context, original: JS, update: JS) -> None:
    if not isinstance(original, CombinedSchema) and isinstance(update, CombinedSchema):
        if len(update.subschemas) == 1:
            sub = ctx.sub()
            _compare(sub, original, update.subschemas[0])
            if sub.compatible():
                ctx.diffs.extend(sub.diffs)
                return
        elif update.criterion in ("anyOf", "oneOf"):
            for s in update.subschemas:
                sub = ctx.sub()
                _compare(sub, original, s)
                if sub.compatible():
                    ctx.diffs.extend(sub.diffs)
                    ctx.add("SUM_TYPE_EXTENDED")
                    return
    elif isinstance(original, CombinedSchema) and not isinstance(update, CombinedSchema):
        if len(original.subschemas) == 1:
            sub = ctx.sub()
            _compare(sub, original.subschemas[0], update)
            if sub.compatible():
                ctx.diffs.extend(sub.diffs)
                return
        elif original.criterion == "allOf":
            for s in original.subschemas:
                sub = ctx.sub()
                _compare(sub, s, update)
                if sub.compatible():
                    ctx.diffs.extend(sub.diffs)
                    ctx.add("PRODUCT_TYPE_NARROWED")
                    return
    if not _same_kind(original, update):
        if isinstance(original, FalseSchema) or isinstance(update, EmptySchema):
            return
        if original.unprocessed.get("connect.type") == "bytes" and update.unprocessed.get("connect.type") == "bytes":
            return
        ctx.add("TYPE_CHANGED")
        return
    if original.id != update.id:
        ctx.add("ID_CHANGED")
    if original.title != update.title:
        ctx.add("TITLE_CHANGED")
    if original.description != update.description:
        ctx.add("DESCRIPTION_CHANGED")
    if (original.default is _ABSENT) != (update.default is _ABSENT) or (
        original.default is not _ABSENT and _canon(original.default) != _canon(update.default)
    ):
        ctx.add("DEFAULT_CHANGED")
    if isinstance(original, StringSchema) and isinstance(update, StringSchema):
        _strings(ctx, original, update)
    elif isinstance(original, NumberSchema) and isinstance(update, NumberSchema):
        _numbers(ctx, original, update)
    elif isinstance(original, ConstSchema) and isinstance(update, ConstSchema):
        if original.value != update.value:
            ctx.add("ENUM_ARRAY_CHANGED", "const")
    elif isinstance(original, EnumSchema) and isinstance(update, EnumSchema):
        if original.values != update.values:
            if update.values >= original.values:
                ctx.add("ENUM_ARRAY_EXTENDED", "enum")
            elif original.values >= update.values:
                ctx.add("ENUM_ARRAY_NARROWED", "enum")
            else:
                ctx.add("ENUM_ARRAY_CHANGED", "enum")
    elif isinstance(original, CombinedSchema) and isinstance(update, CombinedSchema):
        _combined(ctx, original, update)
    elif isinstance(original, NotSchema) and isinstance(update, NotSchema):
        with ctx.enter("not"):
            sub = ctx.sub()
            _compare(sub, update.must_not_match, original.must_not_match)
            ctx.add("NOT_TYPE_NARROWED" if sub.compatible() else "NOT_TYPE_EXTENDED")
    elif isinstance(original, ObjectSchema) and isinstance(update, ObjectSchema):
        _objects(ctx, original, update)
    elif isinstance(original, ArraySchema) and isinstance(update, ArraySchema):
        _arrays(ctx, original, update)


def _bounds(ctx: _Context, name: str, o: Any, u: Any, kinds: tuple[str, str, str, str]) -> None:
    added, removed, increased, decreased = kinds
    if o == u and (o is None) == (u is None):
        return
    if o is None:
        ctx.add(added, name)
    elif u is None:
        ctx.add(removed, name)
    elif o < u:
        ctx.add(increased, name)
    elif o > u:
        ctx.add(decreased, name)


def _strings(ctx: _Context, o: StringSchema, u: StringSchema) -> None:
    _bounds(ctx, "maxLength", o.max_length, u.max_length,
            ("MAX_LENGTH_ADDED", "MAX_LENGTH_REMOVED", "MAX_LENGTH_INCREASED", "MAX_LENGTH_DECREASED"))
    _bounds(ctx, "minLength", o.min_length, u.min_length,
            ("MIN_LENGTH_ADDED", "MIN_LENGTH_REMOVED", "MIN_LENGTH_INCREASED", "MIN_LENGTH_DECREASED"))
    if o.pattern is None and u.pattern is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif o.pattern is not None and u.pattern is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif o.pattern is not None and o.pattern != u.pattern:
        ctx.add("PATTERN_CHANGED", "pattern")


def _decimal(v: Any) -> Decimal | None:
    if v is None:
        return None
    try:
        return Decimal(str(v))
    except InvalidOperation:
        return None


def _numbers(ctx: _Context, o: NumberSchema, u: NumberSchema) -> None:
    _bounds(ctx, "maximum", o.maximum, u.maximum, ("MAXIMUM_ADDED", "MAXIMUM_REMOVED", "MAXIMUM_INCREASED", "MAXIMUM_DECREASED"))
    _bounds(ctx, "minimum", o.minimum, u.minimum, ("MINIMUM_ADDED", "MINIMUM_REMOVED", "MINIMUM_INCREASED", "MINIMUM_DECREASED"))
    _bounds(ctx, "exclusiveMaximum", o.exclusive_maximum, u.exclusive_maximum,
            ("EXCLUSIVE_MAXIMUM_ADDED", "EXCLUSIVE_MAXIMUM_REMOVED", "EXCLUSIVE_MAXIMUM_INCREASED",
             "EXCLUSIVE_MAXIMUM_DECREASED"))
    _bounds(ctx, "exclusiveMinimum", o.exclusive_minimum, u.exclusive_minimum,
            ("EXCLUSIVE_MINIMUM_ADDED", "EXCLUSIVE_MINIMUM_REMOVED", "EXCLUSIVE_MINIMUM_INCREASED",
             "EXCLUSIVE_MINIMUM_DECREASED"))
    om, um = _decimal(o.multiple_of), _decimal(u.multiple_of)
    equal = (om is None and um is None) or (om is not None and um is not None and om == um)
    if not equal:
        if om is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif um is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        elif om != 0 and um % om == 0:
            ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")
        elif um != 0 and om % um == 0:
            ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
        else:
            ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    if o.requires_integer != u.requires_integer:
        ctx.add("TYPE_EXTENDED" if o.requires_integer else "TYPE_NARROWED")


def _max_matching(edges: dict[int, list[int]], n_right: int) -> int:
    """The size of a maximum matching of a bipartite graph (left -> right lists)."""
    match_right = [-1] * n_right

    def augment(left: int, seen: set[int]) -> bool:
        for r in edges.get(left, ()):
            if r in seen:
                continue
            seen.add(r)
            if match_right[r] < 0 or augment(match_right[r], seen):
                match_right[r] = left
                return True
        return False

    return sum(1 for left in edges if augment(left, set()))


def _distinct(schemas: Iterable[JS]) -> list[JS]:
    seen: set[str] = set()
    out = []
    for s in schemas:
        if s.key not in seen:
            seen.add(s.key)
            out.append(s)
    return out


def _combined(ctx: _Context, o: CombinedSchema, u: CombinedSchema) -> None:
    if o.criterion != u.criterion:
        single_o, single_u = len(o.subschemas) == 1, len(u.subschemas) == 1
        if (u.criterion == "anyOf" or (single_o and single_u) or (single_o and u.criterion == "oneOf")
                or (single_u and o.criterion == "allOf")):
            ctx.add("COMBINED_TYPE_EXTENDED")
        else:
            ctx.add("COMBINED_TYPE_CHANGED")
            return
    originals, updates = _distinct(o.subschemas), _distinct(u.subschemas)
    if len(originals) < len(updates):
        ctx.add("PRODUCT_TYPE_EXTENDED" if u.criterion == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(originals) > len(updates):
        ctx.add("SUM_TYPE_NARROWED" if o.criterion in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[int, list[int]] = {}
    for i, os_ in enumerate(originals):
        with ctx.enter(f"{o.criterion}/{i}"):
            for j, us in enumerate(updates):
                sub = ctx.sub()
                _compare(sub, os_, us)
                if sub.compatible():
                    edges.setdefault(i, []).append(j)
    # (a matched pairing's differences are all compatible ones: they change no verdict)
    matched = _max_matching(edges, len(updates))
    if matched < min(len(originals), len(updates)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[*+}](?:[^()\\]|\\.)*\)[*+{]")


def _search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (Java's ``find``); a pattern that does
    not compile here, or whose nested quantifiers could backtrack without end, matches nothing."""
    if _NESTED_QUANTIFIER.search(pattern) or len(text) > 1000:
        return False
    try:
        return re.search(pattern, text) is not None
    except (re.error, RecursionError, OverflowError):
        return False


def _object_open(s: ObjectSchema) -> bool:
    if not s.permits_additional or s.additional is not None or s.pattern_properties:
        return False
    return s.unevaluated is None or isinstance(s.unevaluated, EmptySchema)


def _object_partial(s: ObjectSchema, name: str) -> JS | None:
    for pattern, schema in s.pattern_properties.items():
        if _search(pattern, name):
            return schema
    if s.additional is not None:
        return s.additional
    if s.permits_additional and s.additional is None:
        un = s.unevaluated
        if un is not None and not isinstance(un, (FalseSchema, EmptySchema)):
            return un
    return None


def _unevaluated(ctx: _Context, name: str, o: JS | None, u: JS | None, kinds: tuple[str, str, str, str]) -> None:
    added, removed, extended, narrowed = kinds
    if o is None and u is None:
        return
    with ctx.enter(name):
        if o is None:
            ctx.add(removed if isinstance(u, FalseSchema) else narrowed)
        elif u is None:
            ctx.add(added if isinstance(o, FalseSchema) else extended)
        elif isinstance(o, FalseSchema) and not isinstance(u, FalseSchema):
            ctx.add(added)
        elif not isinstance(o, FalseSchema) and isinstance(u, FalseSchema):
            ctx.add(removed)
        elif isinstance(o, EmptySchema) and not isinstance(u, EmptySchema):
            ctx.add(narrowed)
        elif not isinstance(o, EmptySchema) and isinstance(u, EmptySchema):
            ctx.add(extended)
        else:
            _compare(ctx, o, u)


def _objects(ctx: _Context, o: ObjectSchema, u: ObjectSchema) -> None:
    with ctx.enter("required"):
        for name in o.properties:
            if name in u.properties:
                with ctx.enter(name):
                    was, now = name in o.required, name in u.required
                    if was and not now:
                        ctx.add("REQUIRED_ATTRIBUTE_REMOVED")
                    elif now and not was:
                        ctx.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if u.properties[name].has_default
                                else "REQUIRED_ATTRIBUTE_ADDED")
    with ctx.enter("properties"):
        for name in _union_keys(o.properties, u.properties):
            with ctx.enter(name):
                os_, us = o.properties.get(name), u.properties.get(name)
                if us is None:
                    assert os_ is not None
                    if _object_open(u):
                        ctx.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
                        continue
                    partial = _object_partial(u, name)
                    if partial is not None:
                        sub = ctx.sub()
                        _compare(sub, os_, partial)
                        ctx.diffs.extend(sub.diffs)
                        ctx.add("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                                else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                    elif isinstance(os_, FalseSchema):
                        ctx.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
                    else:
                        ctx.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
                elif os_ is None:
                    if _object_open(o):
                        if isinstance(us, EmptySchema):
                            ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
                        elif name in u.required:
                            ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL" if us.has_default
                                    else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
                        else:
                            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
                        continue
                    partial = _object_partial(o, name)
                    if partial is not None:
                        sub = ctx.sub()
                        _compare(sub, partial, us)
                        ctx.diffs.extend(sub.diffs)
                        ctx.add("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                                else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                    if name in u.required:
                        ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if us.has_default
                                else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
                    else:
                        ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
                else:
                    _compare(ctx, os_, us)
    with ctx.enter("dependencies"):
        for name in _union_keys(o.property_dependencies, u.property_dependencies):
            with ctx.enter(name):
                od, ud = o.property_dependencies.get(name), u.property_dependencies.get(name)
                if ud is None:
                    ctx.add("DEPENDENCY_ARRAY_REMOVED")
                elif od is None:
                    ctx.add("DEPENDENCY_ARRAY_ADDED")
                elif od != ud:
                    if ud >= od:
                        ctx.add("DEPENDENCY_ARRAY_EXTENDED")
                    elif od >= ud:
                        ctx.add("DEPENDENCY_ARRAY_NARROWED")
                    else:
                        ctx.add("DEPENDENCY_ARRAY_CHANGED")
        for name in _union_keys(o.schema_dependencies, u.schema_dependencies):
            with ctx.enter(name):
                osd, usd = o.schema_dependencies.get(name), u.schema_dependencies.get(name)
                if usd is None:
                    ctx.add("DEPENDENCY_SCHEMA_REMOVED")
                elif osd is None:
                    ctx.add("DEPENDENCY_SCHEMA_ADDED")
                else:
                    _compare(ctx, osd, usd)
    with ctx.enter("additionalProperties"):
        if o.permits_additional != u.permits_additional:
            ctx.add("ADDITIONAL_PROPERTIES_ADDED" if u.permits_additional else "ADDITIONAL_PROPERTIES_REMOVED")
        elif o.additional is None and u.additional is not None:
            ctx.add("ADDITIONAL_PROPERTIES_NARROWED")
        elif u.additional is None and o.additional is not None:
            ctx.add("ADDITIONAL_PROPERTIES_EXTENDED")
        else:
            _compare(ctx, o.additional, u.additional)
    _unevaluated(ctx, "unevaluatedProperties", o.unevaluated, u.unevaluated,
                 ("UNEVALUATED_PROPERTIES_ADDED", "UNEVALUATED_PROPERTIES_REMOVED", "UNEVALUATED_PROPERTIES_EXTENDED",
                  "UNEVALUATED_PROPERTIES_NARROWED"))
    _bounds(ctx, "maxProperties", o.max_properties, u.max_properties,
            ("MAX_PROPERTIES_ADDED", "MAX_PROPERTIES_REMOVED", "MAX_PROPERTIES_INCREASED", "MAX_PROPERTIES_DECREASED"))
    _bounds(ctx, "minProperties", o.min_properties, u.min_properties,
            ("MIN_PROPERTIES_ADDED", "MIN_PROPERTIES_REMOVED", "MIN_PROPERTIES_INCREASED", "MIN_PROPERTIES_DECREASED"))


def _union_keys(a: dict[str, Any], b: dict[str, Any]) -> Iterator[str]:
    yield from a
    yield from (k for k in b if k not in a)


def _array_open(s: ArraySchema) -> bool:
    if not s.permits_additional_items or s.additional_items is not None:
        return False
    return s.unevaluated is None or isinstance(s.unevaluated, EmptySchema)


def _array_partial(s: ArraySchema) -> JS | None:
    if s.additional_items is not None:
        return s.additional_items
    if s.permits_additional_items:
        un = s.unevaluated
        if un is not None and not isinstance(un, (FalseSchema, EmptySchema)):
            return un
    return None


def _arrays(ctx: _Context, o: ArraySchema, u: ArraySchema) -> None:
    with ctx.enter("items"):
        _compare(ctx, o.all_items, u.all_items)
    oi, ui = o.item_schemas or [], u.item_schemas or []
    common = min(len(oi), len(ui))
    for i in range(common):
        with ctx.enter(f"items/{i}"):
            _compare(ctx, oi[i], ui[i])
    for i in range(common, len(oi)):
        with ctx.enter(f"items/{i}"):
            if _array_open(u):
                ctx.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
                continue
            partial = _array_partial(u)
            if partial is not None:
                sub = ctx.sub()
                _compare(sub, oi[i], partial)
                ctx.diffs.extend(sub.diffs)
                ctx.add("ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                        else "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
            elif isinstance(oi[i], FalseSchema):
                ctx.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
            else:
                ctx.add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    for i in range(common, len(ui)):
        with ctx.enter(f"items/{i}"):
            if _array_open(o):
                ctx.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if isinstance(ui[i], EmptySchema)
                        else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
                continue
            partial = _array_partial(o)
            if partial is not None:
                sub = ctx.sub()
                _compare(sub, partial, ui[i])
                ctx.diffs.extend(sub.diffs)
                ctx.add("ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                        else "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
            else:
                ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
    with ctx.enter("additionalItems"):
        if o.permits_additional_items != u.permits_additional_items:
            ctx.add("ADDITIONAL_ITEMS_REMOVED" if o.permits_additional_items else "ADDITIONAL_ITEMS_ADDED")
        elif o.additional_items is None and u.additional_items is not None:
            ctx.add("ADDITIONAL_ITEMS_NARROWED")
        elif u.additional_items is None and o.additional_items is not None:
            ctx.add("ADDITIONAL_ITEMS_EXTENDED")
        else:
            _compare(ctx, o.additional_items, u.additional_items)
    _unevaluated(ctx, "unevaluatedItems", o.unevaluated, u.unevaluated,
                 ("UNEVALUATED_ITEMS_ADDED", "UNEVALUATED_ITEMS_REMOVED", "UNEVALUATED_ITEMS_EXTENDED",
                  "UNEVALUATED_ITEMS_NARROWED"))
    _bounds(ctx, "maxItems", o.max_items, u.max_items, ("MAX_ITEMS_ADDED", "MAX_ITEMS_REMOVED", "MAX_ITEMS_INCREASED",
                                                        "MAX_ITEMS_DECREASED"))
    _bounds(ctx, "minItems", o.min_items, u.min_items, ("MIN_ITEMS_ADDED", "MIN_ITEMS_REMOVED", "MIN_ITEMS_INCREASED",
                                                        "MIN_ITEMS_DECREASED"))
    if o.unique_items != u.unique_items:
        ctx.add("UNIQUE_ITEMS_REMOVED" if o.unique_items else "UNIQUE_ITEMS_ADDED", "uniqueItems")
    _bounds(ctx, "maxContains", o.max_contains, u.max_contains,
            ("MAX_CONTAINS_ADDED", "MAX_CONTAINS_REMOVED", "MAX_CONTAINS_INCREASED", "MAX_CONTAINS_DECREASED"))
    _bounds(ctx, "minContains", o.min_contains, u.min_contains,
            ("MIN_CONTAINS_ADDED", "MIN_CONTAINS_REMOVED", "MIN_CONTAINS_INCREASED", "MIN_CONTAINS_DECREASED"))


# -- the parsed schema -------------------------------------------------------------------------


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


class JsonSchema:
    """A JSON Schema as the registry keeps it (see the module docstring)."""

    schema_type = JSON

    def __init__(self, document: Any, references: tuple[Reference, ...], model: JS, canonical: str,
                 draft: int) -> None:
        self.document = document
        self.references = references
        self.model = model
        self.draft = draft
        self._canonical = canonical

    @property
    def canonical(self) -> str:
        return self._canonical

    def normalized(self) -> JsonSchema:
        return JsonSchema(self.document, tuple(sorted(set(self.references))), self.model,
                          _dumps(_sorted_keys(self.document)), self.draft)

    def formatted(self, fmt: str) -> str:
        return self.canonical

    def incompatibilities(self, writer: Any) -> list[Incompatibility]:
        if not isinstance(writer, JsonSchema):
            return [DIFFERENT_TYPE]
        try:
            differences = diff(writer.model, self.model)
        except RecursionError:
            raise SchemaError(f"the schemas nest deeper than {MAX_DEPTH} levels") from None
        return [d.incompatibility() for d in differences if d.type not in COMPATIBLE_CHANGES]

    def __repr__(self) -> str:
        return f"JsonSchema({self.canonical[:80]!r})"


def _draft_of(document: Any) -> int:
    if not isinstance(document, dict):
        return 7
    uri = document.get("$schema")
    if not isinstance(uri, str):
        return 7
    base = uri.split("#", 1)[0].rstrip("/")
    tail = base.split("://", 1)[-1]
    draft = _DRAFTS.get("http://" + tail) or _DRAFTS.get("https://" + tail)
    if draft is None:
        raise SchemaError(f"$schema {uri!r} is not a JSON Schema draft the registry knows (drafts 4, 6, 7, "
                          "2019-09 and 2020-12)")
    return draft


def _check_meta(document: Any, draft: int) -> None:
    try:
        import jsonschema
    except ImportError:  # the registry extra is not installed: the loader's checks alone
        return
    validator = {
        4: jsonschema.Draft4Validator,
        6: jsonschema.Draft6Validator,
        7: jsonschema.Draft7Validator,
        2019: jsonschema.Draft201909Validator,
        2020: jsonschema.Draft202012Validator,
    }[draft]
    try:
        validator.check_schema(document)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise SchemaError(f"{exc.message}" + (f" at #/{where}" if where else "")) from None


def parse_json_schema(text: str, references: Iterable[tuple[Reference, str]] = ()) -> JsonSchema:
    """Parse a JSON Schema; ``references`` are the referenced schemas' texts, each found by a
    ``$ref`` to its reference name.  Raises :class:`SchemaError`."""
    try:
        document = loads(text)
    except (ValueError, RecursionError) as exc:
        raise SchemaError(f"Invalid JSON: {exc}") from None
    if not isinstance(document, (dict, bool)):
        raise SchemaError("a JSON Schema is an object or a boolean")
    refs = list(references)
    try:
        draft = _draft_of(document)
        _check_meta(document, draft)
        docs: dict[str, _Document] = {}
        for ref, ref_text in refs:
            try:
                ref_doc = loads(ref_text)
            except (ValueError, RecursionError) as exc:
                raise SchemaError(f"the reference {ref.name} is not JSON: {exc}") from None
            docs[ref.name] = _Document(ref.name, ref_doc)
        root = _Document("", document)
        loader = _Loader(root, docs, draft)
        model = loader.load(document, root, root.base)
        # every $ref must resolve, and none may only refer to itself
        checked = 0
        while checked < len(loader.references):
            _deref(loader.references[checked])
            checked += 1
    except RecursionError:
        raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels") from None
    return JsonSchema(document, tuple(r for r, _t in refs), model, _dumps(document), draft)

