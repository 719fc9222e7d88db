"""``odradek schemas``: the schema registry from the command line (its REST API over HTTP).

``list`` the subjects, ``get`` a schema (by subject and version, or by id), ``register`` one,
``check`` one against a subject's versions (exit 1 when incompatible), ``delete`` a subject or a
version, and read or set the compatibility ``config`` and the ``mode``.  ``--output json`` prints
what the registry answered.  The registry is ``--registry URL`` (default
``$SCHEMA_REGISTRY_URL``, else ``http://127.0.0.1:8081``); with ``--user`` the password comes
from ``--password-file`` or ``$SCHEMA_REGISTRY_PASSWORD`` (never from the command line, where
other users could read it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from odradek.cli._common import EXIT_FAILURE, EXIT_OK, add_output_option, fail, print_table, write_json
from odradek.errors import OdradekError

__all__ = ["add_parser", "run"]

DEFAULT_URL = "http://127.0.0.1:8081"
MEDIA = "application/vnd.schemaregistry.v1+json"


def _connection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--registry", metavar="URL", default=None,
                   help=f"the registry's URL (default $SCHEMA_REGISTRY_URL, else {DEFAULT_URL})")
    p.add_argument("--user", metavar="NAME", default=None, help="HTTP Basic user (a broker user: SASL PLAIN or SCRAM)")
    p.add_argument("--password-file", metavar="FILE", default=None,
                   help="a file holding --user's password (default $SCHEMA_REGISTRY_PASSWORD)")
    p.add_argument("--ca-file", metavar="PEM", default=None, help="the CA certificates to trust for https")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the registry (default 30)")


def _schema_source(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--schema-file", metavar="FILE", help="the schema (an .avsc, .json or .proto file; - for stdin)")
    group.add_argument("--schema", metavar="TEXT", help="the schema itself")
    p.add_argument("--type", dest="schema_type", type=str.upper, choices=("AVRO", "JSON", "PROTOBUF"), default=None,
                   help="the schema's type (default: from the file's extension, else AVRO)")
    p.add_argument("--reference", action="append", default=[], metavar="NAME=SUBJECT:VERSION",
                   help="a schema reference (repeatable)")
    p.add_argument("--normalize", action="store_true", help="normalize the schema first")


def add_parser(sub: Any) -> None:
    """Add the ``odradek schemas`` subcommand (list, get, register, check and delete schemas of a schema
    registry) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser("schemas", help="list, get, register, check and delete schemas of the schema registry",
                       description="The schema registry's subjects, schemas, compatibility and modes.")
    ssub = p.add_subparsers(dest="schemas_command", required=True, metavar="COMMAND")
    lst = ssub.add_parser("list", help="list subjects", description="List the subjects.")
    lst.add_argument("--prefix", default=None, help="only subjects starting with this")
    lst.add_argument("--deleted", action="store_true", help="soft-deleted subjects too")
    get = ssub.add_parser("get", help="show a schema", description="Show a subject's version, or a schema by id.")
    get.add_argument("subject", nargs="?", help="the subject (or --id)")
    get.add_argument("--version", default="latest", help="a version number or latest (default)")
    get.add_argument("--id", type=int, default=None, help="the schema with this id")
    get.add_argument("--format", default=None, help="a format: serialized (Protobuf), resolved (Avro)")
    reg = ssub.add_parser("register", help="register a schema", description="Register a schema under a subject.")
    reg.add_argument("subject")
    _schema_source(reg)
    chk = ssub.add_parser("check", help="check a schema's compatibility (exit 1 if incompatible)",
                          description="Check whether a schema may follow a subject's versions.")
    chk.add_argument("subject")
    chk.add_argument("--version", default=None, help="against this version only (default: as registering would)")
    _schema_source(chk)
    dele = ssub.add_parser("delete", help="delete a subject or a version", description="Soft-delete (or with "
                           "--permanent, after a soft delete, delete for good) a subject or one of its versions.")
    dele.add_argument("subject")
    dele.add_argument("--version", default=None, help="only this version")
    dele.add_argument("--permanent", action="store_true", help="delete for good (after a soft delete)")
    cfg = ssub.add_parser("config", help="show or set a compatibility level",
                          description="Show or set the compatibility level, globally or for a subject.")
    cfg.add_argument("subject", nargs="?", help="the subject (default: the global level)")
    cfg.add_argument("--set", metavar="LEVEL", default=None,
                     help="NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE")
    cfg.add_argument("--delete", action="store_true", help="remove the subject's (or the global) level")
    mode = ssub.add_parser("mode", help="show or set a mode", description="Show or set the mode (READWRITE, "
                           "READONLY, IMPORT), globally or for a subject.")
    mode.add_argument("subject", nargs="?", help="the subject (default: the global mode)")
    mode.add_argument("--set", metavar="MODE", default=None, help="READWRITE, READONLY or IMPORT")
    mode.add_argument("--delete", action="store_true", help="remove the subject's mode")
    mode.add_argument("--force", action="store_true", help="IMPORT even if schemas exist")
    for c in (lst, get, reg, chk, dele, cfg, mode):
        _connection(c)
        add_output_option(c)


class RegistryError(OdradekError):
    """An error answer of the schema registry: the HTTP ``status`` and the registry's ``error_code``
    (``code``, e.g. 40401 subject not found) with its message."""

    def __init__(self, status: int, code: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class _Client:
    def __init__(self, args: argparse.Namespace) -> None:
        self.url = (args.registry or os.environ.get("SCHEMA_REGISTRY_URL") or DEFAULT_URL).rstrip("/")
        self.timeout = args.timeout
        self.auth: str | None = None
        if args.user:
            if args.password_file:
                password = Path(args.password_file).read_text().rstrip("\r\n")
            else:
                password = os.environ.get("SCHEMA_REGISTRY_PASSWORD", "")
            self.auth = "Basic " + base64.b64encode(f"{args.user}:{password}".encode()).decode()
        self.context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None

    def __call__(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        params = {k: ("true" if v is True else v) for k, v in query.items() if v not in (None, False)}
        target = self.url + path + (("?" + urllib.parse.urlencode(params)) if params else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": MEDIA}
        if data is not None:
            headers["Content-Type"] = MEDIA
        if self.auth:
            headers["Authorization"] = self.auth
        req = urllib.request.Request(target, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.context) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                answer = json.loads(raw)
                raise RegistryError(exc.code, answer.get("error_code"), str(answer.get("message"))) from None
            except (ValueError, AttributeError):
                raise RegistryError(exc.code, None, raw.decode("utf-8", "replace")[:500] or exc.reason) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RegistryError(0, None, f"cannot reach the schema registry at {self.url} ({reason})") from None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _request_body(args: argparse.Namespace) -> dict[str, Any]:
    if args.schema_file is not None:
        text = sys.stdin.read() if args.schema_file == "-" else Path(args.schema_file).read_text()
        suffix = Path(args.schema_file).suffix.lower()
        guessed = {".proto": "PROTOBUF", ".json": "JSON"}.get(suffix)
    else:
        text, guessed = args.schema, None
    schema_type = args.schema_type or guessed or "AVRO"
    body: dict[str, Any] = {"schema": text}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    refs = []
    for item in args.reference:
        name, eq, rest = item.partition("=")
        subject, colon, version = rest.rpartition(":")
        if not eq or not colon or not subject or not (version.isdigit() or version == "latest"):
            raise RegistryError(0, None, f"--reference {item!r} is not NAME=SUBJECT:VERSION")
        refs.append({"name": name, "subject": subject, "version": -1 if version == "latest" else int(version)})
    if refs:
        body["references"] = refs
    return body


def _show_schema(answer: dict[str, Any], out: Any) -> None:
    for key in ("subject", "version", "id", "schemaType"):
        if key in answer:
            out.write(f"{key}: {answer[key]}\n")
    if answer.get("references"):
        for r in answer["references"]:
            out.write(f"reference: {r['name']} = {r['subject']} version {r['version']}\n")
    text = answer.get("schema", "")
    with contextlib.suppress(ValueError):
        text = json.dumps(json.loads(text), indent=2)
    out.write(text.rstrip("\n") + "\n")


def _run(args: argparse.Namespace, client: _Client, out: Any) -> int:
    cmd = args.schemas_command
    as_json = args.output == "json"
    if cmd == "list":
        subjects = client("GET", "/subjects", subjectPrefix=args.prefix, deleted=args.deleted)
        if as_json:
            write_json(subjects, out)
            return EXIT_OK
        rows = [["SUBJECT", "VERSIONS", "LATEST ID", "TYPE"]]
        for s in subjects:
            try:
                versions = client("GET", f"/subjects/{_quote(s)}/versions")
                latest = client("GET", f"/subjects/{_quote(s)}/versions/latest")
                rows.append([s, ",".join(map(str, versions)), str(latest["id"]), latest.get("schemaType", "AVRO")])
            except RegistryError:
                rows.append([s, "(deleted)", "", ""])
        print_table(rows, out)
        return EXIT_OK
    if cmd == "get":
        if args.id is not None:
            answer = client("GET", f"/schemas/ids/{args.id}", format=args.format)
            answer = {"id": args.id, **answer}
        elif args.subject:
            answer = client("GET", f"/subjects/{_quote(args.subject)}/versions/{_quote(args.version)}",
                            format=args.format)
        else:
            raise RegistryError(0, None, "give a subject or --id")
        write_json(answer, out) if as_json else _show_schema(answer, out)
        return EXIT_OK
    if cmd == "register":
        answer = client("POST", f"/subjects/{_quote(args.subject)}/versions", _request_body(args),
                        normalize=args.normalize)
        write_json(answer, out) if as_json else out.write(f"registered {args.subject}: schema id {answer['id']}\n")
        return EXIT_OK
    if cmd == "check":
        path = f"/compatibility/subjects/{_quote(args.subject)}/versions"
        if args.version is not None:
            path += f"/{_quote(args.version)}"
        answer = client("POST", path, _request_body(args), verbose=True, normalize=args.normalize)
        if as_json:
            write_json(answer, out)
        else:
            out.write("compatible\n" if answer.get("is_compatible") else "incompatible\n")
            for message in answer.get("messages") or []:
                out.write(f"  {message}\n")
        return EXIT_OK if answer.get("is_compatible") else EXIT_FAILURE
    if cmd == "delete":
        if args.version is not None:
            answer = client("DELETE", f"/subjects/{_quote(args.subject)}/versions/{_quote(args.version)}",
                            permanent=args.permanent)
        else:
            answer = client("DELETE", f"/subjects/{_quote(args.subject)}", permanent=args.permanent)
        if as_json:
            write_json(answer, out)
        else:
            versions = answer if isinstance(answer, list) else [answer]
            kind = "permanently deleted" if args.permanent else "deleted"
            out.write(f"{kind} {args.subject} version(s) {', '.join(map(str, versions))}\n")
        return EXIT_OK
    if cmd in ("config", "mode"):
        path = f"/{cmd}" + (f"/{_quote(args.subject)}" if args.subject else "")
        if args.delete:
            answer = client("DELETE", path)
        elif args.set is not None:
            body = {"compatibility": args.set.upper()} if cmd == "config" else {"mode": args.set.upper()}
            answer = client("PUT", path, body, force=getattr(args, "force", False))
        else:
            answer = client("GET", path)
        if as_json:
            write_json(answer, out)
        else:
            value = answer.get("compatibilityLevel") or answer.get("compatibility") or answer.get("mode")
            out.write(f"{args.subject or 'global'}: {value}\n")
        return EXIT_OK
    return EXIT_FAILURE


def run(args: argparse.Namespace, out: Any = None) -> int:
    """Run ``odradek schemas`` for the parsed ``args``; writes to ``out`` (default stdout) and returns the
    exit status: 0, or 1 with the error on stderr."""
    out = out if out is not None else sys.stdout
    try:
        client = _Client(args)
        return _run(args, client, out)
    except RegistryError as exc:
        code = f" (error code {exc.code})" if exc.code is not None else ""
        return fail("schemas", f"{exc}{code}")
    except OSError as exc:
        return fail("schemas", str(exc))
