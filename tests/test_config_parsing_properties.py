"""Property tests of the parsers of outside configuration: the ``server.properties`` reader, the
value parser and the broker configuration built from them.  Whatever a file, a variable or an
override holds — bad numbers, huge values, unknown names, odd unicode, broken escapes, bytes that
are not text — the answer is a value or a :class:`ConfigError` naming the problem, never another
exception."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from odradek.config import BROKER_CONFIGS, BrokerConfig, ConfigError, parse_value, read_properties

NAMES = sorted(BROKER_CONFIGS)
TYPES = ("boolean", "string", "int", "short", "long", "double", "list", "class", "password")
LIMITS = {"short": 2**15, "int": 2**31, "long": 2**63}

#: text a hostile or careless file may hold: digits of other scripts, separators, escapes, controls
odd_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(list("0123456789-+.eE_ =:#!\\\t\r\n\f\x00\x85\u2028\u0660\u0661\u06f1\uff11\u00a0")),
    ),
    max_size=60,
)
#: names near the schema's (a typo away), the schema's own, and anything at all
names = st.one_of(
    st.sampled_from(NAMES),
    st.builds(lambda n, i, c: n[:i] + c + n[i + 1 :], st.sampled_from(NAMES), st.integers(0, 40), st.sampled_from("._-xZ")),
    st.builds(lambda n, rest: f"listener.name.{n}.{rest}", st.sampled_from(["plaintext", "sasl_ssl", "sasl-ssl", ""]),
              st.sampled_from([*NAMES, "scram-sha-256.sasl.jaas.config", "plain.sasl.jaas.confg", "gssapi."])),
    odd_text,
)
values = st.one_of(
    odd_text,
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["9" * 400, "-" + "9" * 41, "1e400", "NaN", "Infinity", "0x10", "1_000", "١٢٣", "true ", "TRUE", ""]),
)


def _read(data: bytes) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "server.properties"
        path.write_bytes(data)
        return read_properties(path)


@given(st.binary(max_size=400))
@example(b"\xff\xfe=1\n")
@example(b"a=\\u12\n")
@example(b"key\\\n")
@example(b"\x00\n")
def test_any_bytes_as_a_properties_file_read_or_refused(data: bytes) -> None:
    try:
        props = _read(data)
    except ConfigError as exc:
        assert "server.properties" in exc.message
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())


def _escape(text: str, *, key: bool) -> str:
    out = []
    for i, c in enumerate(text):
        if c == "\\" or c in "=:#!" or (c in " \t\f" and (key or i == 0)):
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif not c.isprintable() or c in "\x85\u2028\u2029\x1c\x1d\x1e":
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c)
        else:
            out.append(c)
    return "".join(out)


@given(st.dictionaries(st.text(min_size=1, max_size=20).filter(lambda k: k.strip() == k and k),
                       st.text(max_size=30).map(str.strip), max_size=8))
def test_escaped_properties_read_back_as_written(props: dict[str, str]) -> None:
    """Java's escapes (``\\=``, ``\\:``, ``\\uXXXX``, ``\\n``...) read back to the text written."""
    props = {k: v for k, v in props.items() if all(ord(c) < 0x10000 for c in k + v)}
    body = "".join(f"{_escape(k, key=True)}={_escape(v, key=False)}\n" for k, v in props.items())
    assert _read(body.encode()) == props


@given(st.sampled_from(TYPES), values)
@example("int", "١٢٣")
@example("long", "9" * 400)
@example("double", "NaN")
def test_a_value_of_any_type_parses_or_is_refused(type_: str, value: str) -> None:
    try:
        parsed = parse_value("some.config", type_, value)
    except ConfigError as exc:
        assert exc.message.startswith(f"Invalid value {value} for configuration some.config: ")
        return
    if type_ in LIMITS:
        assert isinstance(parsed, int) and -LIMITS[type_] <= parsed < LIMITS[type_]
        assert value.strip().lstrip("+-").isascii()
    elif type_ == "double":
        assert isinstance(parsed, float) and parsed == parsed
    elif type_ == "boolean":
        assert parsed in (True, False)
    else:
        assert isinstance(parsed, str)


@pytest.mark.parametrize("type_", ["short", "int", "long"])
@given(st.data())
def test_every_number_in_range_is_read_and_none_beyond_or_in_other_digits(type_: str, data: st.DataObject) -> None:
    """As Kafka reads them: ASCII decimal within the type's range (Python's int() would also
    take ``1_000`` and the digits of other scripts, which a Kafka broker refuses)."""
    limit = LIMITS[type_]
    n = data.draw(st.integers(-limit, limit - 1))
    assert parse_value("n", type_, f" {n} ") == n
    beyond = data.draw(st.one_of(st.integers(limit, 2**80), st.integers(-(2**80), -limit - 1)))
    with pytest.raises(ConfigError):
        parse_value("n", type_, str(beyond))
    script = data.draw(st.sampled_from([0x0660, 0x06F0, 0x0966, 0xFF10]))  # Arabic-Indic, Devanagari, fullwidth
    with pytest.raises(ConfigError):
        parse_value("n", type_, str(n).translate({ord("0") + d: script + d for d in range(10)}))
    if abs(n) >= 1000:
        with pytest.raises(ConfigError):
            parse_value("n", type_, f"{n:_}")


@given(st.dictionaries(names, values, max_size=6))
def test_any_settings_build_a_config_or_are_refused(settings: dict[str, str]) -> None:
    """Every source reads the same rows: a name not in the schema or a value not of its type is a
    ConfigError (naming where it came from); what is accepted reads back typed."""
    try:
        config = BrokerConfig(settings, env={}, properties_source="in server.properties")
    except ConfigError as exc:
        assert "server.properties" in exc.message or "listener" in exc.message
        return
    for name in settings:
        if name in BROKER_CONFIGS:
            config.get(name)
        else:
            assert name.startswith("listener.name.")
