"""A strict parser of HTTP/1.x request heads, shared by the broker's HTTP listeners (``/metrics``
and the schema registry).  Pure: bytes in, a request or :class:`BadHttpRequest` out."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from odradek.errors import OdradekError

__all__ = ["MAX_HEADERS", "BadHttpRequest", "HttpRequest", "parse_request_head"]

#: the most header lines a request may have
MAX_HEADERS = 100
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(r"[\x21-\x7e]+")
_VERSION = re.compile(r"HTTP/1\.[01]")
# headers that must not come twice (RFC 9112: a request with two Host headers is a 400; two
# lengths could be read two ways by two parsers)
_SINGLE = frozenset({"host", "authorization", "content-length", "content-type"})


class BadHttpRequest(OdradekError, ValueError):
    """A request head that is not HTTP/1.x: answered 400."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    target: str
    version: str
    #: header names lower-cased; values without surrounding blanks
    headers: Mapping[str, str]

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]


def parse_request_head(head: bytes) -> HttpRequest:
    """The request line and header fields of an HTTP/1.0 or 1.1 request head (up to and with the
    empty line), read strictly: anything else raises :class:`BadHttpRequest`."""
    if not head.endswith(b"\r\n\r\n"):
        raise BadHttpRequest("the request head does not end with an empty line")
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise BadHttpRequest("the request line is not METHOD TARGET VERSION")
    method, target, version = parts
    if not _TOKEN.fullmatch(method) or not _TARGET.fullmatch(target) or not _VERSION.fullmatch(version):
        raise BadHttpRequest("the request line is not METHOD TARGET HTTP/1.x")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadHttpRequest(f"more than {MAX_HEADERS} header fields")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name):  # also line folding: a line starting with a blank
            raise BadHttpRequest("a header field is not name: value")
        value = value.strip(" \t")
        if any(c in value for c in "\x00\r\n"):
            raise BadHttpRequest("a header value holds a control character")
        key = name.lower()
        if key in headers:
            if key in _SINGLE:
                raise BadHttpRequest(f"more than one {name} header")
            headers[key] += ", " + value
        else:
            headers[key] = value
    return HttpRequest(method, target, version, headers)
