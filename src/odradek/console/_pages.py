"""What the console's pages share: the cluster's data, the page frame, the console's mode and
CSRF token (:class:`Pages`, the base of each group of pages), and the reading of form values and
the showing of numbers and times."""

from __future__ import annotations

import datetime as dt

from odradek.client.admin import TopicDescription
from odradek.console._data import ClusterData
from odradek.console._html import Page, e, form_hidden, q
from odradek.console._http import HttpError, Request

__all__ = ["Pages", "ms_text", "num", "parse_int", "parse_time"]

_NOTICES = {
    "created": "Topic created.",
    "deleted": "Topic deleted.",
    "config-set": "Config updated.",
    "config-deleted": "Config override removed: the default applies again.",
}


class Pages:
    """The base of a group of pages: ``data`` to ask the cluster, ``page`` to frame the HTML."""

    def __init__(self, data: ClusterData, page: Page, *, read_only: bool, csrf_token: str, bootstrap: str) -> None:
        self.data = data
        self.page = page
        self.read_only = read_only
        self.csrf_token = csrf_token
        self.bootstrap = bootstrap

    def csrf(self) -> str:
        """The hidden field every form that changes something carries."""
        return form_hidden(csrf=self.csrf_token)

    def notice(self, request: Request) -> str | None:
        """The message of a page reached after a change (``?notice=``)."""
        return _NOTICES.get(request.query.get("notice", ""))

    async def topic_or_404(self, name: str) -> TopicDescription:
        topic = await self.data.topic(name)
        if topic is None:
            raise HttpError(404, f"topic {name!r} does not exist")
        return topic

    def topic_tabs(self, name: str, active: str) -> str:
        """The tabs of a topic's pages (``active``: the current one's path suffix)."""
        tabs = [("", "Partitions"), ("/messages", "Messages"), ("/configs", "Configs")]
        if not self.read_only:
            tabs.append(("/delete", "Delete"))
        out = "".join(
            f'<a href="/topics/{e(q(name))}{suffix}"{" class=active" if suffix == active else ""}>{e(label)}</a>'
            for suffix, label in tabs
        )
        return f'<nav class="tabs">{out}</nav>'


def num(x: int | float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.1f}"
    return f"{x:,}"


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_LAST_MS = (dt.datetime.max.replace(tzinfo=dt.UTC) - _EPOCH) // dt.timedelta(milliseconds=1)


def ms_text(ms: int) -> str:
    """A record's timestamp as UTC time; -1 (Kafka's "no timestamp") as "-".  A producer may set
    any 64-bit value: one before 1970 or after the year 9999 is shown as the number of
    milliseconds it is."""
    if ms == -1:
        return "-"
    if not 0 <= ms <= _LAST_MS:
        return f"{ms} ms"
    return (_EPOCH + dt.timedelta(milliseconds=ms)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def parse_time(text: str) -> int:
    """Milliseconds since the epoch from digits (already ms) or an ISO 8601 time (UTC unless it says)."""
    text = text.strip()
    if text.isdigit():
        ms = int(text)
    else:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise HttpError(400, f"not a time: {text!r} (use ISO 8601, e.g. 2026-01-31T12:00:00, or ms)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        ms = (when - _EPOCH) // dt.timedelta(milliseconds=1)
    # ListOffsets takes a 64-bit time, and reads the negative ones as "latest", "earliest", ...
    if not 0 <= ms < 1 << 63:
        raise HttpError(400, f"not a time Kafka can search for: {text!r} (from 1970 on, in ms below 2^63)")
    return ms


def parse_int(text: str, what: str, *, minimum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise HttpError(400, f"{what} must be a whole number, not {text!r}") from None
    if minimum is not None and value < minimum:
        raise HttpError(400, f"{what} must be at least {minimum}")
    return value
