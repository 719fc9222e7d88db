"""The console's schema pages: the registry's subjects with their versions and schemas, and the
topics that use each subject.

The registry is asked over its REST API (``GET /schemas``: every live version with its subject,
id, type and text), at ``--schema-registry-url`` (default ``$SCHEMA_REGISTRY_URL``, else the
single-node broker's ``http://127.0.0.1:8081``).  A topic uses a subject when the subject is its
TopicNameStrategy name (``<topic>-key`` / ``<topic>-value``), or when the topic's broker-side
validation (``confluent.{key,value}.schema.validation``) names it through its subject name
strategy: RecordNameStrategy (the subject is the record name of its schemas) or
TopicRecordNameStrategy (``<topic>-<record name>``).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.console._data import ClusterData
from odradek.console._html import Page, e, link, q, table
from odradek.console._http import HttpError, Request, Response
from odradek.console._pages import Pages
from odradek.schemas.validation import record_name, strategy_of

__all__ = ["RegistryReader", "SchemaPages"]

_MEDIA = "application/vnd.schemaregistry.v1+json"


@dataclass
class _Subject:
    name: str
    #: (version, id, type, schema text, references) in version order
    versions: list[tuple[int, int, str, str, list[Any]]] = field(default_factory=list)
    #: (topic, "key" / "value", why)
    topics: list[tuple[str, str, str]] = field(default_factory=list)


class RegistryReader:
    """The registry's REST API, read from a thread (the console's loop never waits on a socket)."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str) -> Any:
        req = urllib.request.Request(self.url + path, headers={"Accept": _MEDIA})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                message = json.loads(raw).get("message")
            except (ValueError, AttributeError):
                message = raw.decode("utf-8", "replace")[:300]
            raise HttpError(502, f"the schema registry at {self.url} answered {exc.code}: {message}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise HttpError(502, f"the schema registry at {self.url} did not answer: {reason}") from None

    async def versions(self) -> list[dict[str, Any]]:
        """Every live version of every subject."""
        answer = await asyncio.to_thread(self._get, "/schemas")
        if not isinstance(answer, list):
            raise HttpError(502, f"the schema registry at {self.url} answered GET /schemas with no list")
        return [v for v in answer if isinstance(v, dict)]


def _subjects(versions: list[dict[str, Any]]) -> dict[str, _Subject]:
    out: dict[str, _Subject] = {}
    for v in versions:
        subject = str(v.get("subject", ""))
        entry = out.setdefault(subject, _Subject(subject))
        entry.versions.append((int(v.get("version", 0)), int(v.get("id", 0)), str(v.get("schemaType", "AVRO")),
                               str(v.get("schema", "")), list(v.get("references") or [])))
    for entry in out.values():
        entry.versions.sort()
    return out


def _uses(subjects: dict[str, _Subject], topics: list[str], configs: Mapping[str, Mapping[str, str | None]]) -> None:
    """Fill each subject's topics (see the module)."""
    names: dict[str, set[str]] = {}  # subject -> the record names of its versions
    for s in subjects.values():
        names[s.name] = {n for _v, _i, t, text, _r in s.versions if (n := record_name(t, text)) is not None}
    for topic in topics:
        cfg = configs.get(topic, {})
        for side in ("key", "value"):
            own = f"{topic}-{side}"
            validates = str(cfg.get(f"confluent.{side}.schema.validation") or "false").lower() == "true"
            if own in subjects:
                subjects[own].topics.append((topic, side, "validated" if validates else "topic name"))
            if not validates:
                continue
            strategy = strategy_of(str(cfg.get(f"confluent.{side}.subject.name.strategy") or ""))
            if strategy == "TopicNameStrategy":
                continue
            for s in subjects.values():
                wanted = names[s.name] if strategy == "RecordNameStrategy" else {f"{topic}-{n}" for n in names[s.name]}
                if s.name in wanted:
                    s.topics.append((topic, side, f"validated ({strategy})"))


def _pretty(schema_type: str, text: str) -> str:
    if schema_type == "PROTOBUF":
        return text
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


class SchemaPages(Pages):
    def __init__(self, data: ClusterData, page: Page, *, read_only: bool, csrf_token: str, bootstrap: str,
                 registry: RegistryReader) -> None:
        super().__init__(data, page, read_only=read_only, csrf_token=csrf_token, bootstrap=bootstrap)
        self.registry = registry

    async def _read(self) -> dict[str, _Subject]:
        versions, described = await asyncio.gather(self.registry.versions(), self.data.topics())
        subjects = _subjects(versions)
        topics = sorted(n for n, t in described.items() if not t.internal)
        configs = await self.data.many_topic_configs(topics) if topics else {}
        _uses(subjects, topics, configs)
        return subjects

    @staticmethod
    def _topic_links(s: _Subject) -> str:
        if not s.topics:
            return '<span class="muted">none</span>'
        return ", ".join(
            f"{link(f'/topics/{q(t)}', t)} <span class=\"muted\">({e(side)}, {e(why)})</span>" for t, side, why in s.topics
        )

    async def schemas(self, request: Request) -> Response:
        subjects = await self._read()
        rows = []
        for name in sorted(subjects):
            s = subjects[name]
            latest = s.versions[-1]
            rows.append([
                link(f"/schemas/{q(name)}", name),
                e(latest[2]),
                e(", ".join(str(v[0]) for v in s.versions)),
                e(latest[1]),
                self._topic_links(s),
            ])
        content = (
            f'<dl class="facts"><dt>Schema registry</dt><dd data-testid="registry-url">{e(self.registry.url)}</dd></dl>'
            + table(["Subject", "Type", "Versions", "Latest id", "Used by topics"], rows, numeric=[3],
                    empty="no subjects registered", test_id="subjects")
        )
        return Response.html(self.page.render("Schemas", content, active="/schemas", page_id="schemas"))

    async def subject(self, request: Request, name: str) -> Response:
        subjects = await self._read()
        s = subjects.get(name)
        if s is None:
            raise HttpError(404, f"no subject {name!r} in the schema registry (or none of its versions is live)")
        rows = [
            [e(v), e(i), e(t), e(", ".join(f"{r.get('name')} ({r.get('subject')} v{r.get('version')})"
                                         for r in refs if isinstance(r, dict)) or "-")]
            for v, i, t, _text, refs in s.versions
        ]
        schemas = "".join(
            f'<h3>Version {e(v)} <span class="muted">id {e(i)}</span></h3>'
            f'<pre class="schema" data-testid="schema-v{e(v)}">{e(_pretty(t, text))}</pre>'
            for v, i, t, text, _refs in reversed(s.versions)
        )
        content = (
            f'<p class="tools">{link("/schemas", "All subjects")}</p>'
            f'<dl class="facts"><dt>Used by topics</dt><dd data-testid="subject-topics">{self._topic_links(s)}</dd></dl>'
            + table(["Version", "Id", "Type", "References"], rows, numeric=[0, 1], test_id="versions")
            + f"<h2>Schemas</h2>{schemas}"
        )
        return Response.html(self.page.render(f"Subject {name}", content, active="/schemas", page_id="subject"))

