"""HTML building blocks for the console's pages: escaping, the page frame, tables, forms.

Every value that reaches a page goes through :func:`e` (or :func:`attr`): topic names, group ids,
config values and above all record keys, values and headers are data from anyone who can write
to the cluster.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from urllib.parse import quote, urlencode

__all__ = ["Page", "attr", "e", "form_hidden", "link", "q", "table", "url"]


def e(value: object) -> str:
    """``value`` as HTML text (quotes escaped too, so it is safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


attr = e


def q(segment: str) -> str:
    """A path segment (a topic or group name) for a URL."""
    return quote(segment, safe="")


def url(path: str, **params: object) -> str:
    """``path`` with query parameters (those that are ``None`` left out)."""
    query = urlencode({k: str(v) for k, v in params.items() if v is not None})
    return path + ("?" + query if query else "")


def link(href: str, text: object, cls: str | None = None) -> str:
    c = f' class="{e(cls)}"' if cls else ""
    return f'<a href="{e(href)}"{c}>{e(text)}</a>'


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    cls: str = "grid",
    foot: Sequence[str] | None = None,
    numeric: Iterable[int] = (),
    empty: str = "nothing to show",
    test_id: str | None = None,
) -> str:
    """A table; cells are HTML already (escape what goes in them)."""
    num = set(numeric)

    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(f'<{tag}{" class=num" if i in num else ""}>{c}</{tag}>' for i, c in enumerate(row))

    body = [f"<tr>{cells('td', r)}</tr>" for r in rows]
    if not body:
        body = [f'<tr><td colspan="{len(headers)}" class="empty">{e(empty)}</td></tr>']
    tid = f' data-testid="{e(test_id)}"' if test_id else ""
    out = [f'<table class="{e(cls)}"{tid}><thead><tr>{cells("th", [e(h) for h in headers])}</tr></thead>']
    out.append("<tbody>" + "".join(body) + "</tbody>")
    if foot is not None:
        out.append(f"<tfoot><tr>{cells('td', foot)}</tr></tfoot>")
    out.append("</table>")
    return "".join(out)


def form_hidden(**fields: object) -> str:
    return "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in fields.items())


class Page:
    """The frame around a page's content: navigation, notices, the read-only badge."""

    NAV = (
        ("/", "Overview"), ("/brokers", "Brokers"), ("/log-dirs", "Log dirs"), ("/reassignments", "Reassignments"),
        ("/topics", "Topics"), ("/groups", "Consumer groups"), ("/share-groups", "Share groups"),
        ("/schemas", "Schemas"), ("/tables", "Tables"), ("/acls", "ACLs"), ("/users", "Users"), ("/quotas", "Quotas"),
        ("/throughput", "Throughput"),
    )

    def __init__(self, *, bootstrap: str, read_only: bool, version: str) -> None:
        self.bootstrap = bootstrap
        self.read_only = read_only
        self.version = version

    def render(
        self,
        title: str,
        content: str,
        *,
        active: str = "/",
        notice: str | None = None,
        error: str | None = None,
        page_id: str = "page",
    ) -> str:
        nav = "".join(
            f'<a href="{href}"{" class=active" if href == active else ""}>{e(label)}</a>' for href, label in self.NAV
        )
        badge = '<span class="badge ro" data-testid="read-only">read-only</span>' if self.read_only else ""
        msgs = ""
        if notice:
            msgs += f'<div class="notice" role="status">{e(notice)}</div>'
        if error:
            msgs += f'<div class="error" role="alert">{e(error)}</div>'
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(title)} · Odradek console</title>"
            '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
            '<link rel="stylesheet" href="/static/console.css">'
            '<script src="/static/console.js" defer></script>'
            f'</head><body data-page="{e(page_id)}">'
            f'<header><span class="brand">Odradek</span><nav>{nav}</nav>'
            f'<span class="cluster">{e(self.bootstrap)}</span>{badge}</header>'
            f"<main><h1>{e(title)}</h1>{msgs}{content}</main>"
            f"<footer>Odradek console {e(self.version)}</footer>"
            "</body></html>"
        )
