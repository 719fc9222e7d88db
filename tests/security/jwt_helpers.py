"""RS256 tokens and a JSON Web Key Set for the OAUTHBEARER tests, made with the openssl command
line (an RSA key, signatures with ``openssl dgst -sha256 -sign``)."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Signer:
    def __init__(self, directory: Path, kid: str = "test-key") -> None:
        self.kid = kid
        self.key = directory / f"{kid}.pem"
        subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                        "-out", str(self.key)], check=True, capture_output=True, timeout=60)
        out = subprocess.run(["openssl", "rsa", "-in", str(self.key), "-noout", "-modulus"],
                             check=True, capture_output=True, text=True, timeout=60).stdout
        self.n = int(out.strip().split("=", 1)[1], 16)
        self.e = 65537

    def jwks(self) -> str:
        n = self.n.to_bytes((self.n.bit_length() + 7) // 8, "big")
        return json.dumps({"keys": [{"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                                     "n": b64url(n), "e": b64url(self.e.to_bytes(3, "big"))}]})

    def token(self, claims: dict[str, Any], *, kid: str | None = None, alg: str = "RS256") -> str:
        header = b64url(json.dumps({"alg": alg, "typ": "JWT", "kid": kid or self.kid}).encode())
        payload = b64url(json.dumps(claims).encode())
        signing_input = f"{header}.{payload}".encode()
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signing_input,
                             check=True, capture_output=True, timeout=60).stdout
        return f"{header}.{payload}.{b64url(sig)}"

    def claims(self, sub: str = "alice", lifetime: float = 3600, **more: Any) -> dict[str, Any]:
        now = time.time()
        return {"sub": sub, "iat": int(now), "exp": int(now + lifetime), "iss": "https://issuer.test",
                "aud": "odradek", **more}
