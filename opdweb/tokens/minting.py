"""A token's secret and its digest: 32 random bytes (256 bits, so a digest without a salt
or a slow hash is enough: nobody can enumerate the space), after a prefix that says what
the string is (secret scanners and people recognise ``opd_``).

The random part is 44 letters and digits (log2(62) * 44 > 261 bits), with no ``-``: the
``wandb`` client takes a key's part after its first dash for the secret and refuses one
shorter than 40 characters (``wandb/sdk/lib/wbauth/validation.py``), so a base64url secret
with a dash near its start would be refused before it reached the product."""
from __future__ import annotations

import hashlib
import secrets
import string

PREFIX = "opd_"
HINT_LENGTH = len(PREFIX) + 6
ALPHABET = string.ascii_letters + string.digits
RANDOM_LENGTH = 44


def new_secret() -> str:
    return PREFIX + "".join(secrets.choice(ALPHABET) for _ in range(RANDOM_LENGTH))


def digest_of(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
