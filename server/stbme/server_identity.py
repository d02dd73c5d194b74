"""How a command proves that the server named in a data directory's lock file is that directory's sidecar
before it sends it a token or a chat: `stbme serve` writes a random secret into the lock (a file only its
owner can read) and answers a challenge with an HMAC of it; a program that merely listens on the lock's
port after a crash cannot."""

from __future__ import annotations

import hashlib
import hmac
import secrets


def new_secret() -> str:
    return secrets.token_hex(32)


def new_nonce() -> str:
    return secrets.token_hex(16)


def proof(secret: str, nonce: str, port: int) -> str:
    """The answer to a challenge. The port the server listens on is part of it, so a program on another
    port cannot relay the challenge to the real server and pass its answer off as its own."""
    message = f"stbme-identity\n{nonce}\n{port}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def proof_matches(secret: str, nonce: str, port: int, answer: object) -> bool:
    return isinstance(answer, str) and hmac.compare_digest(answer, proof(secret, nonce, port))
