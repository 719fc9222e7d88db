"""Compatibility levels and how a new schema is checked against a subject's earlier ones.

The levels are Confluent's.  ``BACKWARD``: the new schema reads data written with the latest
one; ``FORWARD``: the latest reads data written with the new one; ``FULL``: both; the
``_TRANSITIVE`` variants check every earlier version instead of the latest (newest first, the
first failing one reported); ``NONE``: no check.  Whether one schema reads another's data is the
format's rule (:meth:`~odradek.schemas.ParsedSchema.incompatibilities`).

The messages are Confluent's: each reason, then ``{oldSchemaVersion: N}`` and
``{oldSchema: '...'}`` naming the version it failed against, and last
``{validateFields: 'false', compatibility: 'LEVEL'}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from odradek.schemas._common import DIFFERENT_TYPE, ParsedSchema

__all__ = ["DEFAULT_LEVEL", "LEVELS", "Previous", "check", "parse_level"]

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_LEVEL = "BACKWARD"
#: the longest earlier schema quoted in a message (Confluent's limit)
MAX_QUOTED = 10 * 1024


def parse_level(text: object) -> str | None:
    """A compatibility level from its name in any case (None: not one)."""
    if not isinstance(text, str):
        return None
    level = text.strip().upper()
    return level if level in LEVELS else None


@dataclass(frozen=True, slots=True)
class Previous:
    """An earlier version of the subject: its schema and version number (None: not a version,
    e.g. a schema given directly)."""

    schema: ParsedSchema
    version: int | None = None


def _strategy(level: str, new: ParsedSchema, old: Previous) -> list[str]:
    if new.schema_type != old.schema.schema_type:
        return [DIFFERENT_TYPE.render("", "")]
    out: list[str] = []
    if level.startswith("BACKWARD"):
        out = [i.render("new", "old") for i in new.incompatibilities(old.schema)]
    elif level.startswith("FORWARD"):
        out = [i.render("old", "new") for i in old.schema.incompatibilities(new)]
    else:  # FULL: both ways, the old schema quoted once
        out = [i.render("old", "new") for i in old.schema.incompatibilities(new)]
        out += [i.render("new", "old") for i in new.incompatibilities(old.schema)]
    if out:
        if old.version is not None:
            out.append(f"{{oldSchemaVersion: {old.version}}}")
        quoted = old.schema.canonical
        if len(quoted) <= MAX_QUOTED:
            out.append(f"{{oldSchema: '{quoted}'}}")
        else:
            out.append(f"{{oldSchema: <truncated> '{quoted[:MAX_QUOTED]}...'}}")
    return out


def check(level: str, new: ParsedSchema, previous: Sequence[Previous]) -> list[str]:
    """Why ``new`` may not follow ``previous`` (the subject's live versions, oldest first) at
    ``level``; empty: it may."""
    if level == "NONE" or not previous:
        return []
    if level.endswith("_TRANSITIVE"):
        errors: list[str] = []
        for old in reversed(previous):
            errors = _strategy(level, new, old)
            if errors:
                break
    else:
        errors = _strategy(level, new, previous[-1])
    if errors:
        errors.append(f"{{validateFields: 'false', compatibility: '{level}'}}")
    return errors
