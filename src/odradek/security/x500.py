"""The subject of an X.509 certificate as Java's ``X500Principal.getName()`` writes it.

Kafka names a TLS client by its certificate's subject in RFC 2253 form: the relative
distinguished names last-first, joined by commas, the attributes of a multi-valued one joined
by ``+``; ``CN``, ``C``, ``L``, ``ST``, ``O``, ``OU``, ``STREET``, ``DC`` and ``UID`` by
keyword with their string value (``,+"\\<>;`` escaped, as are a leading ``#`` or space and a
trailing space), every other attribute as its dotted OID and ``#`` with the hex of its DER
encoding (so an e-mail address is ``1.2.840.113549.1.9.1=#16...``).  :func:`subject_name`
reads the subject out of the certificate's DER bytes (``SSLSocket.getpeercert(True)``) with a
small DER reader: no dependency, and nothing trusted about lengths.
"""

from __future__ import annotations

from odradek.errors import OdradekError

__all__ = ["CertificateError", "subject_name"]

_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# DirectoryString and friends: UTF8String, PrintableString, TeletexString, IA5String,
# UniversalString, BMPString
_STRING_TAGS = {0x0C: "utf-8", 0x13: "latin-1", 0x14: "latin-1", 0x16: "latin-1", 0x1C: "utf-32-be", 0x1E: "utf-16-be"}


class CertificateError(OdradekError, ValueError):
    """The certificate's bytes are not the DER this reader expects."""


def _tlv(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """``(tag, start of value, end of value)`` of the element at ``pos``."""
    if pos + 2 > end:
        raise CertificateError("truncated element")
    tag = data[pos]
    n = data[pos + 1]
    pos += 2
    if n & 0x80:
        k = n & 0x7F
        if k == 0 or k > 4 or pos + k > end:
            raise CertificateError("bad length")
        n = int.from_bytes(data[pos : pos + k], "big")
        pos += k
    if pos + n > end:
        raise CertificateError("element longer than its container")
    return tag, pos, pos + n


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """``(tag, element start, value start, value end)`` of each element inside a constructed one."""
    out = []
    pos = start
    while pos < end:
        tag, vs, ve = _tlv(data, pos, end)
        out.append((tag, pos, vs, ve))
        pos = ve
    return out


def _oid(raw: bytes) -> str:
    if not raw:
        raise CertificateError("empty OID")
    first = raw[0]
    parts = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    value = 0
    for b in raw[1:]:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _attribute(data: bytes, vs: int, ve: int) -> str:
    kids = _children(data, vs, ve)
    if len(kids) != 2 or kids[0][0] != 0x06:
        raise CertificateError("an attribute is not (OID, value)")
    oid = _oid(data[kids[0][2] : kids[0][3]])
    tag, el_start, v_start, v_end = kids[1]
    keyword = _KEYWORDS.get(oid)
    encoding = _STRING_TAGS.get(tag)
    if keyword is not None and encoding is not None:
        try:
            return f"{keyword}={_escape(data[v_start:v_end].decode(encoding))}"
        except UnicodeDecodeError:
            pass
    return f"{keyword or oid}=#{data[el_start:v_end].hex()}"


def subject_name(der: bytes) -> str:
    """The subject of the DER certificate ``der`` in RFC 2253 form (as Java writes it)."""
    tag, vs, ve = _tlv(der, 0, len(der))
    if tag != 0x30:
        raise CertificateError("not a certificate")
    tag, tvs, tve = _tlv(der, vs, ve)  # TBSCertificate
    if tag != 0x30:
        raise CertificateError("no TBSCertificate")
    fields = _children(der, tvs, tve)
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4][0] != 0x30:
        raise CertificateError("no subject")
    _tag, _el, svs, sve = fields[4]
    rdns = []
    for rtag, _e, rvs, rve in _children(der, svs, sve):
        if rtag != 0x31:
            raise CertificateError("a relative distinguished name is not a SET")
        attrs = [_attribute(der, avs, ave) for atag, _ae, avs, ave in _children(der, rvs, rve) if atag == 0x30]
        rdns.append("+".join(attrs))
    return ",".join(reversed(rdns))
