"""SASL/GSSAPI (Kerberos) on the broker's side, through the ``gssapi`` package (MIT Kerberos).

The exchange of RFC 4752: the client's AP-REQ is accepted with the broker's service key (the
keytab of the listener's JAAS ``Krb5LoginModule`` entry, or ``KRB5_KTNAME``); once the context is
established the broker offers "no security layer" in a wrapped four-byte message and reads the
client's wrapped choice (and authorization id).  The principal is the client's Kerberos name
shortened by ``sasl.kerberos.principal.to.local.rules`` (DEFAULT: ``alice@REALM`` is ``alice``
when REALM is the default realm), as Kafka's KerberosShortNamer does.

``gssapi`` is optional (``pip install gssapi``, which builds against libkrb5-dev): a listener
that enables GSSAPI without it stops the start with that advice.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from odradek.config import ConfigError
from odradek.security import AuthenticationFailed, KafkaPrincipal, SaslServer

__all__ = ["GssapiServer", "KerberosShortNamer", "acceptor_credentials"]

_NO_SECURITY_LAYER = 1


def _gssapi() -> Any:
    try:
        import gssapi  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise ConfigError(
            "GSSAPI (Kerberos) needs the gssapi package: pip install gssapi (it builds against libkrb5-dev)"
        ) from None
    return gssapi


class KerberosShortNamer:
    """``sasl.kerberos.principal.to.local.rules``: ``RULE:[n:fmt](regex)s/pattern/repl/g`` and
    ``DEFAULT`` (a name of the default realm loses its realm), as Hadoop's and Kafka's rules."""

    _RULE = re.compile(r"RULE:\[(\d+):([^\]]*)\](?:\(([^)]*)\))?(?:s/([^/]*)/([^/]*)/(g)?)?(/[LU])?")

    def __init__(self, rules: str, default_realm: str) -> None:
        self.default_realm = default_realm
        self.rules: list[tuple[str, Any]] = []
        for item in re.split(r",\s*(?=RULE:|DEFAULT)", (rules or "DEFAULT").strip()):
            item = item.strip()
            if item == "DEFAULT":
                self.rules.append(("DEFAULT", None))
                continue
            m = self._RULE.fullmatch(item)
            if m is None:
                raise ConfigError(f"sasl.kerberos.principal.to.local.rules: cannot read {item!r}")
            self.rules.append(("RULE", m))

    def short_name(self, principal: str) -> str:
        name, _, realm = principal.partition("@")
        components = name.split("/")
        for kind, m in self.rules:
            if kind == "DEFAULT":
                if realm in ("", self.default_realm):
                    return components[0]
                continue
            if int(m.group(1)) != len(components):
                continue
            base = _fill(m.group(2), {"0": realm, **{str(i + 1): c for i, c in enumerate(components)}})
            if m.group(3) is not None and not re.fullmatch(m.group(3), base):
                continue
            if m.group(4) is not None:
                base = re.sub(m.group(4), m.group(5) or "", base, count=0 if m.group(6) else 1)
            if m.group(7) == "/L":
                base = base.lower()
            elif m.group(7) == "/U":
                base = base.upper()
            return base
        raise ValueError(f"no sasl.kerberos.principal.to.local.rules rule applies to {principal}")


def _fill(fmt: str, values: dict[str, str]) -> str:
    """A rule's ``[n:$1@$0]`` format filled with the name's components and realm."""
    return re.sub(r"\$(\d)", lambda g: values.get(g.group(1), ""), fmt)


def acceptor_credentials(keytab: str | None, principal: str | None) -> Any:
    """The broker's acceptor credentials: its service principal's key from ``keytab``."""
    gssapi = _gssapi()
    try:
        name = gssapi.Name(principal, gssapi.NameType.kerberos_principal) if principal else None
        store = {"keytab": keytab} if keytab else None
        return gssapi.Credentials(name=name, usage="accept", store=store)
    except gssapi.exceptions.GSSError as exc:
        raise ConfigError(f"GSSAPI: cannot use the service key {principal or ''} from {keytab or 'KRB5_KTNAME'}: {exc}") from None


class GssapiServer(SaslServer):
    mechanism = "GSSAPI"

    def __init__(self, credentials: Any, namer: KerberosShortNamer) -> None:
        super().__init__()
        gssapi = _gssapi()
        self._gssapi = gssapi
        self._ctx = gssapi.SecurityContext(creds=credentials, usage="accept")
        self._namer = namer
        self._state = "context"
        self.kerberos_name = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            return self._step(token)
        except self._gssapi.exceptions.GSSError as exc:
            raise AuthenticationFailed(f"Authentication failed: GSSAPI: {exc.gen_message()}") from None

    def _step(self, token: bytes) -> bytes:
        if self._state == "context":
            out = self._ctx.step(token) or b""
            if not self._ctx.complete:
                return bytes(out)
            self.kerberos_name = str(self._ctx.initiator_name)
            if out:
                self._state = "empty"  # the client answers our last context token with nothing
                return bytes(out)
            return self._offer()
        if self._state == "empty":
            return self._offer()
        if self._state == "layer":
            data = self._ctx.unwrap(token).message
            if len(data) < 4 or data[0] != _NO_SECURITY_LAYER:
                raise AuthenticationFailed("Authentication failed: GSSAPI: the client chose a security layer")
            authzid = data[4:].decode("utf-8", "replace")
            try:
                short = self._namer.short_name(self.kerberos_name)
            except ValueError as exc:
                raise AuthenticationFailed(f"Authentication failed: {exc}") from None
            if authzid and authzid not in (self.kerberos_name, short):
                raise AuthenticationFailed("Authentication failed: the authorization id is not the authenticated one")
            self._state = "done"
            self.complete = True
            self.principal = KafkaPrincipal.user(short)
            return b""
        raise AuthenticationFailed("Authentication failed: the GSSAPI exchange is over")

    def _offer(self) -> bytes:
        self._state = "layer"
        offer = struct.pack(">I", (_NO_SECURITY_LAYER << 24) | 0xFFFFFF)
        return bytes(self._ctx.wrap(offer, False).message)
