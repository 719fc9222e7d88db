"""What each request of Confluent's REST API does, over the registry's state.

:class:`RegistryCore` answers reads from a :class:`~odradek.schemas.store.RegistryState` and
plans writes: a write method checks the request against the state (the writer's, caught up) and
returns a :class:`Plan` — the ``_schemas`` records to append and the answer to give once they
are durable.  Parsing and compatibility checks, the CPU work, run in worker threads
(:meth:`RegistryCore.parse`, with a cache of parsed schemas); the state itself is only read on
the event loop, between those awaits.

The rules are Confluent's (``KafkaSchemaRegistry`` / ``AbstractSchemaRegistry``): a schema
registered again under its subject gets its id and version back; the same schema under another
subject gets the same id and a version there; a new schema must be compatible with the subject's
live versions at the subject's level (``IMPORT`` mode skips the check and keeps the ids given);
a soft delete is a flag and a permanent one a tombstone, allowed only after the soft one; a
version that other schemas reference cannot be deleted.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from odradek.registry.errors import RestError
from odradek.schemas import (
    AVRO,
    LEVELS,
    SCHEMA_TYPES,
    ParsedSchema,
    Previous,
    Reference,
    SchemaError,
    check_compatibility,
    parse_level,
    parse_schema,
    schema_type_of,
)
from odradek.schemas.store import (
    RegistryState,
    SchemaVersion,
    clear_subject_record,
    config_record,
    delete_subject_record,
    mode_record,
    schema_key,
    schema_record,
)

__all__ = ["Plan", "RegistryCore", "parse_version", "valid_subject"]

log = logging.getLogger(__name__)

#: the largest version number (Confluent's: 2^31 - 1)
MAX_VERSION = 2**31 - 1
#: parsed schemas kept (a schema parsed again is a dictionary lookup)
PARSED_CACHE = 1000
#: how deep references may chain
MAX_REFERENCE_DEPTH = 32
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")

Record = tuple[bytes, "bytes | None"]


@dataclass
class Plan:
    """Records to append, and the answer once they are durable (None: nothing to write)."""

    records: list[Record] = field(default_factory=list)
    answer: Any = None
    status: int = 200


def valid_subject(subject: str | None) -> bool:
    """Confluent's check: a subject holds no control characters (and is not empty)."""
    return bool(subject) and not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in subject or "")


def parse_version(text: str) -> int:
    """A version path segment: ``latest`` (or -1) is -1; otherwise 1..2^31-1 (42202)."""
    t = text.strip()
    if t.lower() == "latest":
        return -1
    if not t.lstrip("+-").isdigit() or len(t) > 12:
        raise RestError.invalid_version(text)
    v = int(t)
    if (v <= 0 and v != -1) or v > MAX_VERSION:
        raise RestError.invalid_version(text)
    return v


def _schema_answer(sv: SchemaVersion, text: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"subject": sv.subject, "version": sv.version, "id": sv.id}
    if sv.schema_type != AVRO:
        out["schemaType"] = sv.schema_type
    if sv.references:
        out["references"] = [r.to_json() for r in sv.references]
    out["schema"] = sv.schema if text is None else text
    return out


class RegistryCore:
    """The registry's answers and write plans over a state (see the module docstring)."""

    def __init__(self, default_level: str = "BACKWARD", mode_mutability: bool = True,
                 max_record_bytes: Callable[[], int] | None = None) -> None:
        self.default_level = default_level
        self.mode_mutability = mode_mutability
        self.max_record_bytes = max_record_bytes or (lambda: 1 << 20)
        self._parsed: OrderedDict[tuple[Any, ...], ParsedSchema | SchemaError] = OrderedDict()
        self._parsed_lock = threading.Lock()  # the loop reads the cache, worker threads fill it

    # -- parsing, off the loop -----------------------------------------------------------------

    def _parse_cached(self, key: tuple[Any, ...], schema_type: str, text: str,
                      refs: Sequence[tuple[Reference, str]], new: bool) -> ParsedSchema:
        with self._parsed_lock:
            hit = self._parsed.get(key)
        if hit is None:
            try:
                hit = parse_schema(schema_type, text, refs, new=new)
            except SchemaError as exc:
                hit = exc
            except RecursionError:
                hit = SchemaError("the schema nests too deep")
            with self._parsed_lock:
                self._parsed[key] = hit
                while len(self._parsed) > PARSED_CACHE:
                    self._parsed.popitem(last=False)
        if isinstance(hit, SchemaError):
            raise hit
        return hit

    async def parse(self, schema_type: str, text: str, refs: Sequence[tuple[Reference, str]], *,
                    new: bool) -> ParsedSchema:
        """Parse in a worker thread; SchemaError for a bad schema."""
        key = (schema_type, text, tuple(refs), new)
        with self._parsed_lock:
            hit = self._parsed.get(key)
            if hit is not None:
                self._parsed.move_to_end(key)
        if hit is not None:
            if isinstance(hit, SchemaError):
                raise hit
            return hit
        return await asyncio.to_thread(self._parse_cached, key, schema_type, text, list(refs), new)

    async def parse_stored(self, state: RegistryState, sv: SchemaVersion) -> ParsedSchema:
        """A stored version parsed (a schema the registry accepted once: an error here is the
        store's, 50001)."""
        try:
            refs = self.resolve_references(state, sv.references)
            return await self.parse(sv.schema_type, sv.schema, refs, new=False)
        except (SchemaError, RestError) as exc:
            raise RestError.store(f"the stored schema {sv.subject} version {sv.version} (id {sv.id}) cannot be "
                                  f"parsed: {exc}") from None

    def resolve_references(self, state: RegistryState, refs: Sequence[Reference],
                           depth: int = 0) -> list[tuple[Reference, str]]:
        """The referenced schemas' texts, each reference's own references first (42201 when one
        is missing)."""
        if depth > MAX_REFERENCE_DEPTH:
            raise RestError.invalid_schema(f"references nest deeper than {MAX_REFERENCE_DEPTH} levels")
        out: list[tuple[Reference, str]] = []
        seen: set[str] = set()
        for ref in refs:
            sv = state.version(ref.subject, ref.version, deleted=True)
            if sv is None:
                raise RestError.invalid_schema(
                    f"Invalid schema: the reference {ref.name} names subject {ref.subject} version {ref.version}, "
                    "which does not exist"
                )
            for inner, text in self.resolve_references(state, sv.references, depth + 1):
                if inner.name not in seen:
                    seen.add(inner.name)
                    out.append((inner, text))
            if ref.name not in seen:
                seen.add(ref.name)
                out.append((Reference(ref.name, ref.subject, sv.version), sv.schema))
        return out

    # -- reads ---------------------------------------------------------------------------------

    def config_in_scope(self, state: RegistryState, subject: str | None) -> dict[str, Any]:
        merged: dict[str, Any] = {"compatibilityLevel": self.default_level}
        merged.update(state.config(None) or {})
        if subject is not None:
            merged.update(state.config(subject) or {})
        return merged

    def level(self, state: RegistryState, subject: str) -> str:
        return parse_level(self.config_in_scope(state, subject).get("compatibilityLevel")) or self.default_level

    def subjects(self, state: RegistryState, *, prefix: str | None, deleted: bool, deleted_only: bool) -> list[str]:
        names = state.subject_names(deleted=deleted, deleted_only=deleted_only)
        if prefix and prefix != ":*:":
            names = [n for n in names if n.startswith(prefix)]
        return names

    def versions(self, state: RegistryState, subject: str, *, deleted: bool, deleted_only: bool,
                 deleted_as_negative: bool) -> list[int]:
        if not state.has_subject(subject, deleted=deleted or deleted_only or deleted_as_negative):
            raise RestError.subject_not_found(subject)
        found = state.versions(subject, deleted=True)
        if deleted_as_negative:
            return [-sv.version if sv.deleted else sv.version for sv in found]
        if deleted_only:
            return [sv.version for sv in found if sv.deleted]
        return [sv.version for sv in found if deleted or not sv.deleted]

    def get_version(self, state: RegistryState, subject: str, version: int, *, deleted: bool) -> SchemaVersion:
        sv = state.version(subject, version, deleted=deleted)
        if sv is None:
            if not state.has_subject(subject, deleted=deleted):
                raise RestError.subject_not_found(subject)
            raise RestError.version_not_found(version)
        return sv

    async def formatted(self, state: RegistryState, sv: SchemaVersion, fmt: str) -> str:
        """The schema text in ``format`` (Protobuf's ``serialized``, Avro's ``resolved``)."""
        if not fmt or fmt == "default":
            return sv.schema
        parsed = await self.parse_stored(state, sv)
        return parsed.formatted(fmt)

    async def version_answer(self, state: RegistryState, sv: SchemaVersion, fmt: str) -> dict[str, Any]:
        return _schema_answer(sv, await self.formatted(state, sv, fmt) if fmt else None)

    def schema_by_id(self, state: RegistryState, schema_id: int) -> SchemaVersion:
        sv = state.by_id(schema_id)
        if sv is None:
            raise RestError.schema_not_found(schema_id)
        return sv

    async def id_answer(self, state: RegistryState, schema_id: int, fmt: str, fetch_max_id: bool) -> dict[str, Any]:
        sv = self.schema_by_id(state, schema_id)
        out: dict[str, Any] = {}
        if sv.schema_type != AVRO:
            out["schemaType"] = sv.schema_type
        if sv.references:
            out["references"] = [r.to_json() for r in sv.references]
        out["schema"] = await self.formatted(state, sv, fmt)
        if fetch_max_id:
            out["maxId"] = state.max_id
        return out

    def referenced_by(self, state: RegistryState, subject: str, version: int) -> list[int]:
        sv = self.get_version(state, subject, version, deleted=True)
        return state.referencing(subject, sv.version)

    def schema_types(self) -> list[str]:
        return list(SCHEMA_TYPES)

    # -- the request body ----------------------------------------------------------------------

    def _request(self, state: RegistryState, body: Any) -> tuple[str, str, tuple[Reference, ...], dict[str, Any]]:
        """(schema type, schema text, references, the rest) of a register/lookup/check body."""
        if not isinstance(body, dict):
            raise RestError.unprocessable("the request body is not a JSON object")
        try:
            schema_type = schema_type_of(body.get("schemaType"))
        except SchemaError as exc:
            raise RestError.invalid_schema(str(exc)) from None
        text = body.get("schema")
        if text is not None and not isinstance(text, str):
            raise RestError.unprocessable("schema is not a string")
        if not text or not text.strip():
            raise RestError.invalid_schema("Empty schema")
        refs_raw = body.get("references")
        refs: list[Reference] = []
        if refs_raw is not None:
            if not isinstance(refs_raw, list):
                raise RestError.unprocessable("references is not a list")
            for r in refs_raw:
                if not isinstance(r, dict):
                    raise RestError.unprocessable("a reference is not an object")
                name, subject, version = r.get("name"), r.get("subject"), r.get("version")
                if not isinstance(name, str) or not name or not isinstance(subject, str) or not subject:
                    raise RestError.invalid_schema("Invalid schema: a reference needs a name and a subject")
                if version is None:
                    version = -1
                if isinstance(version, bool) or not isinstance(version, int) or (version <= 0 and version != -1):
                    raise RestError.invalid_schema(f"Invalid schema: reference {name} has version {version!r}")
                if version == -1:
                    latest = state.version(subject, -1)
                    if latest is None:
                        raise RestError.invalid_schema(
                            f"Invalid schema: the reference {name} names subject {subject}, which has no version")
                    version = latest.version
                refs.append(Reference(name, subject, version))
        for unsupported in ("metadata", "ruleSet"):
            if body.get(unsupported) not in (None, {}, []):
                raise RestError.invalid_schema(
                    f"Invalid schema: {unsupported} (data contracts) is not supported by this registry")
        return schema_type, text, tuple(refs), body

    async def _parse_request(self, state: RegistryState, schema_type: str, text: str,
                             refs: tuple[Reference, ...], *, new: bool, normalize: bool) -> ParsedSchema:
        resolved = self.resolve_references(state, refs)
        try:
            parsed = await self.parse(schema_type, text, resolved, new=new)
        except SchemaError as exc:
            raise RestError.invalid_schema(f"Invalid schema of type {schema_type}, details: {exc}") from None
        return parsed.normalized() if normalize else parsed

    def _normalize(self, state: RegistryState, subject: str | None, flag: bool) -> bool:
        return flag or self.config_in_scope(state, subject).get("normalize") is True

    # -- lookup and compatibility (reads that parse) -------------------------------------------

    async def _find(self, state: RegistryState, subject: str, parsed: ParsedSchema, refs: tuple[Reference, ...],
                    *, deleted: bool) -> SchemaVersion | None:
        """The version of ``subject`` holding the same schema as ``parsed``."""
        schema_id = state.id_of(parsed.schema_type, parsed.canonical, refs)
        if schema_id is not None:
            for subj, version in state.subjects_of(schema_id, deleted=deleted):
                if subj == subject:
                    return state.version(subject, version, deleted=True)
        target = parsed.normalized().canonical
        for sv in reversed(state.versions(subject, deleted=deleted)):
            if sv.schema_type != parsed.schema_type or sv.references != refs:
                continue
            stored = await self.parse_stored(state, sv)
            if stored.normalized().canonical == target:
                return sv
        return None

    async def lookup(self, state: RegistryState, subject: str, body: Any, *, normalize: bool,
                     deleted: bool, fmt: str) -> dict[str, Any]:
        schema_type, text, refs, _rest = self._request(state, body)
        parsed = await self._parse_request(state, schema_type, text, refs, new=False,
                                           normalize=self._normalize(state, subject, normalize))
        found = await self._find(state, subject, parsed, refs, deleted=deleted)
        if found is None:
            if not state.has_subject(subject, deleted=deleted):
                raise RestError.subject_not_found(subject)
            raise RestError.schema_not_found()
        return await self.version_answer(state, found, fmt)

    async def _previous(self, state: RegistryState, versions: Sequence[SchemaVersion]) -> list[Previous]:
        return [Previous(await self.parse_stored(state, sv), sv.version) for sv in versions]

    async def check(self, state: RegistryState, subject: str, version: int | None, body: Any, *,
                    normalize: bool, verbose: bool) -> dict[str, Any]:
        """POST /compatibility/subjects/{s}/versions[/{v}]."""
        if version is None:
            against = state.versions(subject)
        else:
            sv = state.version(subject, version)
            if sv is None and version != -1:
                raise RestError.version_not_found(version)
            against = [sv] if sv is not None else []
        try:
            schema_type, text, refs, _rest = self._request(state, body)
            parsed = await self._parse_request(state, schema_type, text, refs, new=True,
                                               normalize=self._normalize(state, subject, normalize))
        except RestError as exc:
            if verbose and exc.code == 42201:
                return {"is_compatible": False, "messages": [exc.message]}
            raise
        previous = await self._previous(state, against)
        level = self.level(state, subject)
        errors = await asyncio.to_thread(check_compatibility, level, parsed, previous)
        out: dict[str, Any] = {"is_compatible": not errors}
        if verbose:
            out["messages"] = errors
        return out

    # -- writes --------------------------------------------------------------------------------

    def _writable(self, state: RegistryState, subject: str) -> str:
        mode = state.mode_in_scope(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise RestError.not_permitted(f"Subject {subject} in context . is in read-only mode")
        return mode

    async def register(self, state: RegistryState, subject: str, body: Any, *, normalize: bool,
                       force: bool = False) -> Plan:
        if not valid_subject(subject):
            raise RestError.invalid_subject(subject)
        schema_type, text, refs, rest = self._request(state, body)
        mode = self._writable(state, subject)
        given_id = rest.get("id")
        given_version = rest.get("version")
        for name, value in (("id", given_id), ("version", given_version)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise RestError.unprocessable(f"{name} is not an integer")
        importing = mode == "IMPORT"
        if given_id is not None and given_id >= 0:
            if not importing:
                raise RestError.not_permitted(f"Subject {subject} in context . is not in import mode")
        else:
            given_id = None
            if mode != "READWRITE":
                raise RestError.not_permitted(f"Subject {subject} in context . is not in read-write mode")
        normalize = self._normalize(state, subject, normalize)
        parsed = await self._parse_request(state, schema_type, text, refs, new=not importing, normalize=normalize)
        canonical = parsed.canonical
        all_versions = state.versions(subject, deleted=True)
        live = [sv for sv in all_versions if not sv.deleted]
        new_version = max((sv.version for sv in all_versions), default=0) + 1
        schema_id = state.id_of(schema_type, canonical, refs)
        if schema_id is not None and (given_id is None or given_id == schema_id):
            mine = [sv for sv in live if sv.id == schema_id and sv.identity() == (schema_type, canonical, refs)]
            if mine and not given_version:
                return Plan(answer={"id": schema_id})
        elif given_id is None:
            schema_id = None
        if not given_version:
            same = await self._find(state, subject, parsed, refs, deleted=False)
            if same is not None and (given_id is None or given_id == same.id):
                return Plan(answer={"id": same.id})
        if not importing and not force:
            previous = await self._previous(state, live)
            errors = await asyncio.to_thread(check_compatibility, self.level(state, subject), parsed, previous)
            if errors:
                raise RestError.incompatible(subject, errors)
        if given_version:
            if given_version <= 0 or given_version > MAX_VERSION:
                raise RestError.invalid_version(str(given_version))
            if given_version != new_version and not importing:
                raise RestError.invalid_schema("Version is not one more than previous version")
            version = given_version
        else:
            version = new_version
        if given_id is not None:
            holder = state.by_id(given_id)
            if holder is not None and holder.identity() != (schema_type, canonical, refs):
                raise RestError.not_permitted(f"Overwrite new schema with id {given_id} in context . is not permitted.")
            schema_id = given_id
        elif schema_id is None:
            schema_id = state.max_id + 1
        existing = state.version(subject, version, deleted=True)
        if existing is not None and existing.identity() != (schema_type, canonical, refs):
            raise RestError.not_permitted(f"Overwrite new schema with id {schema_id} in context . is not permitted.")
        sv = SchemaVersion(subject, version, schema_id, schema_type, canonical, refs, False)
        key, value = schema_record(sv)
        if len(key) + len(value) > self.max_record_bytes():
            raise RestError.schema_too_large("Register operation failed because schema is too large")
        records: list[Record] = []
        for old in all_versions:
            # a soft-deleted earlier version of the same schema gives way to the new one
            if old.deleted and old.id == schema_id and old.version < version and not state.referencing(
                    subject, old.version, deleted=True):
                records.append((schema_key(subject, old.version), None))
        records.append((key, value))
        log.info("registering schema %d as %s version %d (%s, %d bytes)", schema_id, subject, version, schema_type,
                 len(canonical))
        return Plan(records, {"id": schema_id})

    def delete_version(self, state: RegistryState, subject: str, version: int, *, permanent: bool) -> Plan:
        sv = state.version(subject, version, deleted=True)
        if sv is not None and not permanent and sv.deleted:
            raise RestError.version_soft_deleted(subject, sv.version)
        if sv is None:
            if not state.has_subject(subject, deleted=True):
                raise RestError.subject_not_found(subject)
            raise RestError.version_not_found(version)
        self._writable(state, subject)
        if state.referencing(subject, sv.version, deleted=permanent):
            raise RestError.reference_exists(_key_text(subject, sv.version))
        if permanent and not sv.deleted:
            raise RestError.version_not_soft_deleted(subject, sv.version)
        records: list[Record] = []
        if not permanent:
            records.append(schema_record(_deleted(sv)))
        else:
            records.append((schema_key(subject, sv.version), None))
            if all(other.version == sv.version for other in state.versions(subject, deleted=True)):
                if state.mode(subject) is not None:
                    records.append(mode_record(subject, None))
                if state.config(subject) is not None:
                    records.append(config_record(subject, None))
        return Plan(records, sv.version)

    def delete_subject(self, state: RegistryState, subject: str, *, permanent: bool) -> Plan:
        if not state.has_subject(subject, deleted=True):
            raise RestError.subject_not_found(subject)
        if not permanent and not state.has_subject(subject):
            raise RestError.subject_soft_deleted(subject)
        self._writable(state, subject)
        targets = state.versions(subject, deleted=permanent)
        for sv in targets:
            users = {s for i in state.referencing(subject, sv.version, deleted=permanent)
                     for s, _v in state.subjects_of(i, deleted=True)}
            users.discard(subject)
            if users:
                raise RestError.reference_exists(_key_text(subject, sv.version))
            if permanent and not sv.deleted:
                raise RestError.subject_not_soft_deleted(subject)
        versions = [sv.version for sv in targets]
        records: list[Record] = []
        if not permanent:
            records.append(delete_subject_record(subject, max(versions)))
        else:
            records += [(schema_key(subject, v), None) for v in sorted(versions, reverse=True)]
            if state.mode(subject) is not None:
                records.append(mode_record(subject, None))
            if state.config(subject) is not None:
                records.append(config_record(subject, None))
        return Plan(records, versions)

    # -- config and mode -----------------------------------------------------------------------

    def get_config(self, state: RegistryState, subject: str | None, *, default_to_global: bool) -> dict[str, Any]:
        if subject is None:
            found = self.config_in_scope(state, None)
        else:
            own = state.config(subject)
            if own is None and not default_to_global:
                raise RestError.subject_config_not_found(subject)
            found = self.config_in_scope(state, subject) if default_to_global else own or {}
        return _config_answer(found)

    def set_config(self, state: RegistryState, subject: str | None, body: Any) -> Plan:
        if not isinstance(body, dict):
            raise RestError.unprocessable("the request body is not a JSON object")
        if subject is not None and not valid_subject(subject):
            raise RestError.invalid_subject(subject)
        level_text = body.get("compatibility", body.get("compatibilityLevel"))
        level = parse_level(level_text) if level_text is not None else None
        if level_text is not None and level is None:
            raise RestError.invalid_compatibility()
        normalize = body.get("normalize")
        if normalize is not None and not isinstance(normalize, bool):
            raise RestError.unprocessable("normalize is not a boolean")
        merged = dict(state.config(subject) or {})
        if level is not None:
            merged["compatibilityLevel"] = level
        if normalize is not None:
            merged["normalize"] = normalize
        answer: dict[str, Any] = {}
        if level is not None:
            answer["compatibility"] = level
        if normalize is not None:
            answer["normalize"] = normalize
        return Plan([config_record(subject, merged)], answer)

    def delete_config(self, state: RegistryState, subject: str | None) -> Plan:
        if subject is None:
            current = self.config_in_scope(state, None)
            return Plan([config_record(None, None)] if state.config(None) is not None else [], _config_answer(current))
        own = state.config(subject)
        if own is None:
            raise RestError.subject_not_found(subject)
        return Plan([config_record(subject, None)], _config_answer(own))

    def get_mode(self, state: RegistryState, subject: str | None, *, default_to_global: bool) -> dict[str, Any]:
        if subject is None:
            return {"mode": state.mode(None) or "READWRITE"}
        own = state.mode(subject)
        if own is None:
            if not default_to_global:
                raise RestError.subject_mode_not_found(subject)
            return {"mode": state.mode_in_scope(subject)}
        return {"mode": own}

    def set_mode(self, state: RegistryState, subject: str | None, body: Any, *, force: bool) -> Plan:
        if not isinstance(body, dict):
            raise RestError.unprocessable("the request body is not a JSON object")
        if subject is not None and not valid_subject(subject):
            raise RestError.invalid_subject(subject)
        text = body.get("mode")
        mode = text.upper() if isinstance(text, str) else None
        if mode not in MODES:
            raise RestError.invalid_mode()
        if not self.mode_mutability:
            raise RestError.not_permitted("Mode changes are not allowed")
        records: list[Record] = []
        if mode == "IMPORT" and state.mode_in_scope(subject) != "IMPORT" and not force:
            subjects = [subject] if subject is not None else state.subject_names(deleted=True)
            if any(state.has_subject(s) for s in subjects):
                raise RestError.not_permitted("Cannot import since found existing subjects")
            for s in subjects:
                for sv in state.versions(s, deleted=True):
                    if state.referencing(s, sv.version, deleted=True):
                        raise RestError.reference_exists(_key_text(s, sv.version))
                    records.append((schema_key(s, sv.version), None))
            if records:
                records.append(clear_subject_record(subject))
        records.append(mode_record(subject, mode))
        return Plan(records, {"mode": mode})

    def delete_mode(self, state: RegistryState, subject: str | None) -> Plan:
        own = state.mode(subject)
        if own is None:
            if subject is None:
                return Plan([], {"mode": "READWRITE"})
            raise RestError.subject_not_found(subject)
        return Plan([mode_record(subject, None)], {"mode": own})


def _config_answer(settings: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    level = settings.get("compatibilityLevel")
    if level in LEVELS:
        out["compatibilityLevel"] = level
    if isinstance(settings.get("normalize"), bool):
        out["normalize"] = settings["normalize"]
    return out


def _deleted(sv: SchemaVersion) -> SchemaVersion:
    return SchemaVersion(sv.subject, sv.version, sv.id, sv.schema_type, sv.schema, sv.references, True)


def _key_text(subject: str, version: int) -> str:
    return f"{{magic=1,keytype=SCHEMA,subject={subject},version={version}}}"
