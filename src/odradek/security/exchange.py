"""The client's side of a connection's SASL exchange, as a sans-I/O generator that the
clients' transports and the brokers' own channels drive."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import Message
from odradek.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse

from .sasl import AuthenticationFailed, OAuthBearerClient, PlainClient, ScramClient

__all__ = ["Step", "sasl_exchange"]


#: one request of the SASL exchange: (message, version); the driver sends it and sends back the response
Step = tuple[Message, int]


# Any: the exchange is sent back the response to each request it yields (a SaslHandshake or a
# SaslAuthenticate response, of the version the caller chose)
def sasl_exchange(client: PlainClient | ScramClient | OAuthBearerClient | None, version_for: Callable[..., int]) -> Generator[Step, Any, None]:
    """The SASL exchange of one new connection with ``client`` (a fresh mechanism; None: no
    SASL), as requests to send (sans I/O): SaslHandshake v1, then SaslAuthenticate until the
    mechanism is done.  The driver sends each yielded ``(message, version)`` and sends the
    response back in.  Raises KafkaError SASL_AUTHENTICATION_FAILED (or
    UNSUPPORTED_SASL_MECHANISM) with the broker's message."""
    if client is None:
        return
    if version_for(SaslHandshakeRequest) < 1:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker offers only SaslHandshake v0, which this client does not speak")
    shake: SaslHandshakeResponse = yield SaslHandshakeRequest(mechanism=client.mechanism), 1
    if shake.error_code:
        raise KafkaError(
            shake.error_code,
            f"SASL mechanism {client.mechanism} is not enabled on the broker's listener "
            f"(it offers {', '.join(shake.mechanisms) or 'none'})",
        )
    version = version_for(SaslAuthenticateRequest)
    token: bytes | None = client.first()
    while token is not None:
        resp: SaslAuthenticateResponse = yield SaslAuthenticateRequest(auth_bytes=token), version
        if resp.error_code:
            raise KafkaError(resp.error_code, resp.error_message or "SASL authentication failed")
        try:
            token = client.evaluate(bytes(resp.auth_bytes))
        except AuthenticationFailed as exc:
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)) from None
        if client.complete:
            break
