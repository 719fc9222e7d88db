"""How the message browser renders record bytes."""

from __future__ import annotations

from odradek.console._render import MAX_SHOWN, header_text, hexdump, matches, render


def test_auto_picks_json_text_or_hex() -> None:
    assert render(b'{"a":[1,2]}', "auto") == ('{\n  "a": [\n    1,\n    2\n  ]\n}', "json")
    assert render(b"42", "auto") == ("42", "text")  # a bare number stays text in auto mode
    assert render(b"42", "json") == ("42", "json")
    assert render(b"caf\xc3\xa9 ok", "auto") == ("café ok", "text")
    assert render(b"\x00\x01A", "auto") == ("00000000  " + "00 01 41".ljust(47) + "  ..A", "hex")
    assert render(None, "hex") == ("null", "null")
    assert render(b"not json", "json") == ("not json", "text")
    assert render(b"\xff", "text") == ("\ufffd", "text")


def test_long_values_are_cut_and_say_so() -> None:
    text, kind = render(b"a" * (MAX_SHOWN + 10), "auto")
    assert len(text) == MAX_SHOWN and kind == "text+cut"
    assert hexdump(bytes(range(20))).splitlines()[1].startswith("00000010  10 11 12 13")


def test_headers_and_search() -> None:
    assert header_text(b"abc", "auto") == "abc"
    assert header_text(b"\x00\xff", "auto") == "00 ff"
    assert header_text(b"abc", "hex") == "61 62 63"
    assert matches("ADA", None, b'{"user":"ada"}', [])
    assert matches("trace", b"k", b"v", [("trace-id", b"1")])
    assert not matches("zzz", b"k", b"v", [("h", None)])
    assert matches("", None, None, [])
