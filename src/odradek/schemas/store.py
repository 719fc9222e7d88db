"""The records of the ``_schemas`` topic, in Confluent's key and value JSON, and the registry's
state rebuilt from them.

Every change the registry makes is one record of the compacted, single-partition topic, keyed so
that compaction keeps the last word on each thing:

=================  ===========================================================  ==================================================
key type           key                                                          value (None: a tombstone)
=================  ===========================================================  ==================================================
``SCHEMA``         ``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}``   ``{"subject","version","id","schemaType"?,
                                                                                "references"?,"schema","deleted"}``
``CONFIG``         ``{"keytype":"CONFIG","subject":S?,"magic":0}``              ``{"subject"?,"compatibilityLevel","normalize"?}``
``MODE``           ``{"keytype":"MODE","subject":S?,"magic":0}``                ``{"subject"?,"mode"}``
``DELETE_SUBJECT`` ``{"keytype":"DELETE_SUBJECT","subject":S,"magic":0}``       ``{"subject","version"}``: versions up to it deleted
``CLEAR_SUBJECT``  ``{"keytype":"CLEAR_SUBJECT","subject":S,"magic":0}``        ``{"subject"}``: deleted versions forgotten
``NOOP``           ``{"keytype":"NOOP","magic":0}``                             none
=================  ===========================================================  ==================================================

(a subject left out of CONFIG or MODE is the global setting; ``schemaType`` is written for JSON
and PROTOBUF only, as Avro is the default).  A soft-deleted version is its SCHEMA record again
with ``"deleted": true``; a permanent delete is the tombstone of its key.  Key types Odradek does
not use (Confluent's contexts, associations...) are skipped with a count, so that a topic written
by a newer Confluent registry still loads.

:class:`RegistryState` is what a broker serves from: it applies records in offset order
(:meth:`RegistryState.apply`) and answers the registry's questions (a subject's versions, a
schema by id, the id of a schema text, who references a version, the config and mode in scope).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from odradek.errors import OdradekError
from odradek.schemas._common import AVRO, SCHEMA_TYPES, Reference

__all__ = [
    "RecordError",
    "RegistryState",
    "SchemaVersion",
    "clear_subject_record",
    "config_record",
    "delete_subject_record",
    "mode_record",
    "noop_record",
    "schema_key",
    "schema_record",
]

log = logging.getLogger(__name__)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class RecordError(OdradekError, ValueError):
    """A ``_schemas`` record that is not one of the registry's."""


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One version of one subject."""

    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False

    def identity(self) -> tuple[str, str, tuple[Reference, ...]]:
        """What makes two registrations the same schema (and so the same id)."""
        return self.schema_type, self.schema, self.references

    def to_value(self) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != AVRO:
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        out["schema"] = self.schema
        out["deleted"] = self.deleted
        return out


# -- records -----------------------------------------------------------------------------------


def schema_key(subject: str, version: int) -> bytes:
    return _dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def schema_record(v: SchemaVersion) -> tuple[bytes, bytes]:
    return schema_key(v.subject, v.version), _dumps(v.to_value())


#: the key types of ``_schemas`` and the magic values of their keys that this Odradek reads
_KEY_MAGICS: dict[str, tuple[int, ...]] = {
    "SCHEMA": (0, 1), "CONFIG": (0,), "MODE": (0,), "DELETE_SUBJECT": (0,), "CLEAR_SUBJECT": (0,), "NOOP": (0,),
}


def _subject_key(keytype: str, subject: str | None) -> bytes:
    key: dict[str, Any] = {"keytype": keytype}
    if subject is not None:
        key["subject"] = subject
    key["magic"] = 0
    return _dumps(key)


def config_record(subject: str | None, config: dict[str, Any] | None) -> tuple[bytes, bytes | None]:
    """A subject's (None: the global) config, or its removal (``config`` None)."""
    if config is None:
        return _subject_key("CONFIG", subject), None
    value: dict[str, Any] = {} if subject is None else {"subject": subject}
    value.update(config)
    return _subject_key("CONFIG", subject), _dumps(value)


def mode_record(subject: str | None, mode: str | None) -> tuple[bytes, bytes | None]:
    if mode is None:
        return _subject_key("MODE", subject), None
    value: dict[str, Any] = {} if subject is None else {"subject": subject}
    value["mode"] = mode
    return _subject_key("MODE", subject), _dumps(value)


def delete_subject_record(subject: str, version: int) -> tuple[bytes, bytes]:
    return _subject_key("DELETE_SUBJECT", subject), _dumps({"subject": subject, "version": version})


def clear_subject_record(subject: str | None) -> tuple[bytes, bytes]:
    """Forget the deleted versions of ``subject`` (None: of every subject)."""
    return _subject_key("CLEAR_SUBJECT", subject), _dumps({} if subject is None else {"subject": subject})


def noop_record() -> tuple[bytes, None]:
    return _dumps({"keytype": "NOOP", "magic": 0}), None


def _object(raw: bytes | None, what: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RecordError(f"the {what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RecordError(f"the {what} is not a JSON object")
    return value


def _str_or_none(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise RecordError(f"{what} is not a string")


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"{what} is not an integer")
    return value


def _references(value: Any) -> tuple[Reference, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RecordError("references is not a list")
    out = []
    for r in value:
        if not isinstance(r, dict):
            raise RecordError("a reference is not an object")
        name, subject = r.get("name"), r.get("subject")
        if not isinstance(name, str) or not isinstance(subject, str):
            raise RecordError("a reference has no name or subject")
        out.append(Reference(name, subject, _int(r.get("version"), "a reference's version")))
    return tuple(out)


# -- the state ---------------------------------------------------------------------------------


@dataclass
class RegistryState:
    """The registry's contents, rebuilt from ``_schemas`` (see the module docstring)."""

    #: subject -> version -> the version
    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    #: id -> {subject: version} (deleted versions included, as Confluent keeps them)
    id_versions: dict[int, dict[str, int]] = field(default_factory=dict)
    #: (type, schema text, references) -> id
    ids: dict[tuple[str, str, tuple[Reference, ...]], int] = field(default_factory=dict)
    #: (subject, version) -> the ids of the schemas referencing it
    referenced_by: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    #: subject (None: global) -> config fields (``compatibilityLevel``, ``normalize``...)
    configs: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    #: subject (None: global) -> mode
    modes: dict[str | None, str] = field(default_factory=dict)
    #: the largest id seen (a new schema gets the next)
    max_id: int = 0
    #: records skipped: not the registry's, or damaged
    skipped: int = 0
    #: records applied
    applied: int = 0

    # -- applying records --------------------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None, offset: int = -1) -> None:
        """Apply one record (skipped, with a WARN line, if it is not one of the registry's)."""
        try:
            self._apply(key, value)
            self.applied += 1
        except RecordError as exc:
            self.skipped += 1
            log.warning("_schemas record at offset %d skipped: %s", offset, exc)

    def _apply(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        key = _object(raw_key, "key")
        if key is None:
            raise RecordError("the record has no key")
        keytype = key.get("keytype")
        known = _KEY_MAGICS.get(keytype) if isinstance(keytype, str) else None
        magic = key.get("magic", 0)
        if known is not None and magic not in known:
            # a key format of a newer registry: not read by the fields this one knows (Confluent
            # skips such a record with an error line too)
            raise RecordError(
                f"a {keytype} key of magic {magic!r}, a format this Odradek does not read (it reads magic "
                f"{' and '.join(map(str, known))}): written by a newer registry"
            )
        if keytype == "SCHEMA":
            subject = _str_or_none(key.get("subject"), "subject")
            if subject is None:
                raise RecordError("a SCHEMA key has no subject")
            version = _int(key.get("version"), "version")
            value = _object(raw_value, "value")
            if value is None:
                self._tombstone(subject, version)
            else:
                self._schema(subject, version, value)
        elif keytype in ("CONFIG", "MODE"):
            subject = _str_or_none(key.get("subject"), "subject")
            value = _object(raw_value, "value")
            if keytype == "CONFIG":
                if value is None:
                    self.configs.pop(subject, None)
                else:
                    self.configs[subject] = {k: v for k, v in value.items() if k != "subject" and v is not None}
            elif value is None:
                self.modes.pop(subject, None)
            else:
                mode = value.get("mode")
                if mode not in MODES:
                    raise RecordError(f"mode {mode!r} is not one the registry knows")
                self.modes[subject] = mode
        elif keytype == "DELETE_SUBJECT":
            value = _object(raw_value, "value")
            if value is None:
                return
            subject = _str_or_none(value.get("subject"), "subject") or _str_or_none(key.get("subject"), "subject")
            if subject is None:
                raise RecordError("a DELETE_SUBJECT record has no subject")
            upto = _int(value.get("version"), "version")
            for v, sv in list(self.subjects.get(subject, {}).items()):
                if v <= upto and not sv.deleted:
                    self.subjects[subject][v] = _replace_deleted(sv)
        elif keytype == "CLEAR_SUBJECT":
            value = _object(raw_value, "value")
            if value is None:
                return
            subject = _str_or_none(value.get("subject"), "subject")
            for s in [s for s in self.subjects if subject is None or s == subject]:
                for v, sv in list(self.subjects[s].items()):
                    if sv.deleted:
                        self._tombstone(s, v)
        elif keytype == "NOOP":
            return
        else:
            raise RecordError(f"key type {keytype!r} is not one Odradek's registry uses")

    def _schema(self, subject: str, version: int, value: dict[str, Any]) -> None:
        schema = value.get("schema")
        if not isinstance(schema, str):
            raise RecordError("a SCHEMA value has no schema")
        schema_type = value.get("schemaType") or AVRO
        if schema_type not in SCHEMA_TYPES:
            raise RecordError(f"schema type {schema_type!r} is not one the registry serves")
        sv = SchemaVersion(
            subject, version, _int(value.get("id"), "id"), schema_type, schema,
            _references(value.get("references")), value.get("deleted") is True,
        )
        old = self.subjects.get(subject, {}).get(version)
        if old is not None and old.id != sv.id:
            self._forget(old)
        existing = self.ids.get(sv.identity())
        known = self.id_versions.get(sv.id)
        if known and existing != sv.id:
            # an id already holding another schema (Confluent refuses the duplicate the same way)
            first = next(iter(known.items()))
            other = self.subjects.get(first[0], {}).get(first[1])
            if other is not None and other.identity() != sv.identity():
                raise RecordError(f"schema id {sv.id} already holds another schema")
        self.subjects.setdefault(subject, {})[version] = sv
        self.id_versions.setdefault(sv.id, {})[subject] = version
        self.ids.setdefault(sv.identity(), sv.id)
        for ref in sv.references:
            self.referenced_by.setdefault((ref.subject, ref.version), set()).add(sv.id)
        self.max_id = max(self.max_id, sv.id)

    def _tombstone(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        if not versions or version not in versions:
            return
        sv = versions.pop(version)
        if not versions:
            del self.subjects[subject]
        self._forget(sv)

    def _forget(self, sv: SchemaVersion) -> None:
        holders = self.id_versions.get(sv.id)
        if holders is not None and holders.get(sv.subject) == sv.version:
            del holders[sv.subject]
            if not holders:
                del self.id_versions[sv.id]
                if self.ids.get(sv.identity()) == sv.id:
                    del self.ids[sv.identity()]
        if sv.references and not self._id_used(sv.id):
            for ref in sv.references:
                users = self.referenced_by.get((ref.subject, ref.version))
                if users is not None:
                    users.discard(sv.id)
                    if not users:
                        del self.referenced_by[(ref.subject, ref.version)]

    def _id_used(self, schema_id: int) -> bool:
        return bool(self.id_versions.get(schema_id))

    # -- questions ---------------------------------------------------------------------------

    def versions(self, subject: str, *, deleted: bool = False) -> list[SchemaVersion]:
        """A subject's versions in order (``deleted``: soft-deleted ones too)."""
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if deleted or not found[v].deleted]

    def has_subject(self, subject: str, *, deleted: bool = False) -> bool:
        return any(deleted or not sv.deleted for sv in self.subjects.get(subject, {}).values())

    def subject_names(self, *, deleted: bool = False, deleted_only: bool = False) -> list[str]:
        out = []
        for s in sorted(self.subjects):
            live = self.has_subject(s)
            if deleted_only:
                if not live:
                    out.append(s)
            elif live or deleted:
                out.append(s)
        return out

    def version(self, subject: str, version: int, *, deleted: bool = False) -> SchemaVersion | None:
        """A version (-1: the latest live one; with ``deleted``, the latest of all)."""
        found = self.subjects.get(subject, {})
        if version == -1:
            live = [v for v in found if deleted or not found[v].deleted]
            return found[max(live)] if live else None
        sv = found.get(version)
        if sv is None or (sv.deleted and not deleted):
            return None
        return sv

    def by_id(self, schema_id: int) -> SchemaVersion | None:
        """A version holding schema ``schema_id`` (its text, type and references)."""
        holders = self.id_versions.get(schema_id)
        if not holders:
            return None
        for subject, version in sorted(holders.items()):
            sv = self.subjects.get(subject, {}).get(version)
            if sv is not None:
                return sv
        return None

    def subjects_of(self, schema_id: int, *, deleted: bool = False) -> list[tuple[str, int]]:
        """(subject, version) of every version holding schema ``schema_id``."""
        out = []
        for subject, version in self.id_versions.get(schema_id, {}).items():
            sv = self.subjects.get(subject, {}).get(version)
            if sv is not None and (deleted or not sv.deleted):
                out.append((subject, version))
        return sorted(out)

    def id_of(self, schema_type: str, schema: str, references: tuple[Reference, ...]) -> int | None:
        return self.ids.get((schema_type, schema, references))

    def referencing(self, subject: str, version: int, *, deleted: bool = False) -> list[int]:
        """The ids of the schemas that reference ``subject`` ``version``."""
        ids = self.referenced_by.get((subject, version), set())
        return sorted(i for i in ids if self.subjects_of(i, deleted=deleted))

    def config(self, subject: str | None) -> dict[str, Any] | None:
        return self.configs.get(subject)

    def mode(self, subject: str | None) -> str | None:
        return self.modes.get(subject)

    def mode_in_scope(self, subject: str | None, default: str = "READWRITE") -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, default)

    def schema_count(self) -> int:
        """Live (not deleted) subject versions."""
        return sum(1 for versions in self.subjects.values() for sv in versions.values() if not sv.deleted)

    def live_subject_count(self) -> int:
        return sum(1 for s in self.subjects if self.has_subject(s))

    def iter_versions(self) -> Iterator[SchemaVersion]:
        for versions in self.subjects.values():
            yield from versions.values()


def _replace_deleted(sv: SchemaVersion) -> SchemaVersion:
    return SchemaVersion(sv.subject, sv.version, sv.id, sv.schema_type, sv.schema, sv.references, True)
