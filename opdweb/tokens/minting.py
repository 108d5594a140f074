"""A token's secret and its digest: 32 random bytes (256 bits, so a digest without a salt
or a slow hash is enough: nobody can enumerate the space), after a prefix that says what
the string is (secret scanners and people recognise ``opd_``)."""
from __future__ import annotations

import hashlib
import secrets

PREFIX = "opd_"
HINT_LENGTH = len(PREFIX) + 6


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest_of(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
