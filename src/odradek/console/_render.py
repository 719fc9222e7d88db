"""How the message browser shows keys, values and headers: JSON, text or a hex dump.

Record bytes are arbitrary: the result is plain text (escaped by the page) plus the name of the
rendering chosen, so that ``auto`` can say what it found.
"""

from __future__ import annotations

import json

__all__ = ["FORMATS", "MAX_SHOWN", "as_text", "header_text", "matches", "render"]

FORMATS = ("auto", "json", "text", "hex")
#: bytes of one key or value shown at most (the rest is cut, and the page says so)
MAX_SHOWN = 64 * 1024


def _printable(text: str) -> bool:
    return all(ch.isprintable() or ch in "\n\r\t" for ch in text)


def hexdump(data: bytes) -> str:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {hexes:<47}  {text}")
    return "\n".join(lines)


def _json(text: str) -> str | None:
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return json.dumps(parsed, indent=2, ensure_ascii=False)


def render(data: bytes | None, fmt: str) -> tuple[str, str]:
    """``(text, kind)``: kind is ``null``, ``json``, ``text`` or ``hex`` (``+cut`` when shortened)."""
    if data is None:
        return "null", "null"
    cut = len(data) > MAX_SHOWN
    shown = bytes(data[:MAX_SHOWN])
    suffix = "+cut" if cut else ""
    if fmt == "hex":
        return hexdump(shown), "hex" + suffix
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if fmt == "text":
        return (text if text is not None else shown.decode("utf-8", "replace")), "text" + suffix
    if text is not None and not cut:
        pretty = _json(text)
        if pretty is not None and (fmt == "json" or text.strip()[:1] in "{["):
            return pretty, "json"
    if fmt == "json":  # asked for JSON but it is not: say so by showing what it is
        return (text if text is not None else hexdump(shown)), ("text" if text is not None else "hex") + suffix
    if text is not None and _printable(text):
        return text, "text" + suffix
    return hexdump(shown), "hex" + suffix


def header_text(data: bytes | None, fmt: str) -> str:
    """A header value on one line: text when it is printable UTF-8 (or asked for), else hex."""
    if data is None:
        return "null"
    raw = bytes(data[:MAX_SHOWN])
    if fmt == "hex":
        return raw.hex(" ")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace") if fmt == "text" else raw.hex(" ")
    return text if fmt == "text" or _printable(text) else raw.hex(" ")


def as_text(data: bytes | None) -> str:
    return "" if data is None else bytes(data).decode("utf-8", "replace")


def matches(needle: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> bool:
    """Whether ``needle`` (case-insensitive) occurs in the key, the value or a header."""
    if not needle:
        return True
    n = needle.lower()
    if n in as_text(key).lower() or n in as_text(value).lower():
        return True
    return any(n in name.lower() or n in as_text(v).lower() for name, v in headers)
