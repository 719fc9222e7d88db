"""Security decisions as pure logic: principals, SASL mechanisms, certificate names.

No sockets and no TLS here (the broker's listeners and the clients' transport do the I/O, and
build TLS contexts); credentials are kept by :mod:`odradek.coordination`.
"""

from .exchange import sasl_exchange
from .oauthbearer import JwksValidator, OAuthBearerServer, TokenError, UnsecuredValidator, parse_jwks
from .principal import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper
from .sasl import (
    SCRAM_MECHANISMS,
    AuthenticationFailed,
    OAuthBearerClient,
    PlainClient,
    PlainServer,
    SaslServer,
    ScramClient,
    ScramCredential,
    ScramServer,
    parse_jaas,
    plain_verifier,
)
from .x500 import CertificateError, subject_name

__all__ = [
    "ANONYMOUS",
    "SCRAM_MECHANISMS",
    "AuthenticationFailed",
    "CertificateError",
    "JwksValidator",
    "KafkaPrincipal",
    "OAuthBearerClient",
    "OAuthBearerServer",
    "PlainClient",
    "PlainServer",
    "SaslServer",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "SslPrincipalMapper",
    "TokenError",
    "UnsecuredValidator",
    "parse_jaas",
    "parse_jwks",
    "plain_verifier",
    "sasl_exchange",
    "subject_name",
]
