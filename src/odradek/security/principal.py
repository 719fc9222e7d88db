"""Principals: who a connection is, as Kafka names them (``User:alice``).

An unauthenticated listener's connections are ``User:ANONYMOUS``; a SASL connection is the
user it authenticated as; a TLS connection with a client certificate is the certificate's
subject as Java's ``X500Principal.getName()`` writes it (RFC 2253, e.g.
``CN=alice,OU=eng,O=Example``: see :mod:`odradek.security.x500`), rewritten by
``ssl.principal.mapping.rules`` when they say so (:class:`SslPrincipalMapper`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from odradek.config import ConfigError

__all__ = ["ANONYMOUS", "USER_TYPE", "KafkaPrincipal", "SslPrincipalMapper"]

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``type:name``; Kafka's only principal type in practice is ``User``."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` (the name may itself hold colons: ``User:CN=a:b``)."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is TYPE:NAME, not {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"


# RULE:pattern/replacement/[LU], the pattern and replacement may hold escaped slashes
_RULE = re.compile(r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


def _substitute(replacement: str, match: re.Match[str]) -> str:
    """``$1``... of ``replacement`` filled from ``match``'s groups."""
    return re.sub(r"\$(\d)", lambda g: match.group(int(g.group(1))) or "", replacement)


class SslPrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: a list of ``RULE:pattern/replacement/[LU]`` and
    ``DEFAULT`` tried in order on the certificate's distinguished name; the first rule whose
    pattern matches the whole name gives the principal name (``$1``... refer to its groups;
    ``L``/``U`` lower- or upper-case the result); ``DEFAULT`` keeps the name as it is.  A name
    no rule matches is refused (Kafka: "No rules apply to ...")."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        text = (rules or "DEFAULT").strip()
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ConfigError(f"ssl.principal.mapping.rules: cannot read a rule at {text[pos:]!r}")
            if m.group(1) == "DEFAULT":
                self.rules.append(_Rule(None, "", ""))
            else:
                pattern = m.group(2).replace("\\/", "/")
                try:
                    compiled = re.compile(pattern)
                except re.error as exc:
                    raise ConfigError(f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {exc}") from None
                self.rules.append(_Rule(compiled, m.group(3).replace("\\/", "/"), m.group(4)))
            pos = m.end()

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            if rule.pattern is None:
                return distinguished_name
            m = rule.pattern.fullmatch(distinguished_name)
            if m is None:
                continue
            out = _substitute(rule.replacement, m)
            if rule.case == "L":
                out = out.lower()
            elif rule.case == "U":
                out = out.upper()
            return out
        raise ValueError(f"no ssl.principal.mapping.rules rule applies to {distinguished_name!r}")
