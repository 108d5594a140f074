"""Store URIs, parsed and checked without touching any store.

``s3://bucket/prefix`` names a prefix of a bucket on the configured S3-compatible server;
anything else is a local path (``file:///abs`` or a plain path).  Keys below a store's root
are relative, ``/``-separated, and may not climb out of it: ``..``, a NUL or control
character, or a backslash are refused, and a leading ``/`` is dropped (``/a`` is ``a`` below
the root), so no key names another prefix or bucket.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

# S3's bucket naming rules (lowercase, digits, dots and hyphens, 3-63 characters).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class BadURI(ValueError):
    """A URI or key that names nothing a store may hold."""


@dataclass(frozen=True)
class StoreURI:
    scheme: str  # "s3" or "file"
    bucket: str  # "" for a local path
    path: str  # the prefix in the bucket (no leading or trailing slash), or the absolute local path

    def __str__(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.path}".rstrip("/")
        return self.path

    def child(self, key: str) -> StoreURI:
        key = clean_key(key)
        if not key:
            return self
        joined = f"{self.path.rstrip('/')}/{key}" if self.path else key
        return StoreURI(self.scheme, self.bucket, joined)

    def contains(self, other: StoreURI) -> bool:
        """Whether ``other`` is this prefix or below it (whole path segments only)."""
        if (self.scheme, self.bucket) != (other.scheme, other.bucket):
            return False
        root = self.path.rstrip("/")
        return not root or other.path == root or other.path.startswith(root + "/")


def is_remote(value: str) -> bool:
    return value.startswith("s3://")


def parse(value: str) -> StoreURI:
    """The store URI ``value`` names; raises :class:`BadURI` for one that is malformed."""
    if not isinstance(value, str) or not value.strip():
        raise BadURI("is empty")
    if "\x00" in value or not value.isprintable():
        raise BadURI("contains a NUL, a newline or another control character")
    if value.startswith("s3://"):
        parts = urlsplit(value)
        if parts.query or parts.fragment or parts.username or parts.password or parts.port:
            raise BadURI(f"{value!r}: an s3:// URI is s3://bucket/prefix, with no query, credentials or port")
        bucket = parts.hostname or ""
        if not _BUCKET.match(bucket) or parts.netloc != bucket:
            raise BadURI(f"{value!r}: {bucket!r} is not a valid bucket name")
        return StoreURI("s3", bucket, clean_key(unquote(parts.path)))
    if value.startswith("file://"):
        parts = urlsplit(value)
        if parts.netloc not in ("", "localhost"):
            raise BadURI(f"{value!r}: a file:// URI names a path on this host (file:///path)")
        value = unquote(parts.path)
    if "://" in value:
        raise BadURI(f"{value!r}: unknown scheme (use s3://bucket/prefix or a local path)")
    return StoreURI("file", "", value)


def clean_key(key: str) -> str:
    """``key`` as a relative, ``/``-separated key inside a store; raises :class:`BadURI` for
    one that would climb out of it."""
    if "\x00" in key or not key.isprintable() or "\\" in key:
        raise BadURI(f"{key!r} is not a usable key (a NUL, control character or backslash)")
    parts = [p for p in key.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise BadURI(f"{key!r} climbs out of its store ('..')")
    return "/".join(parts)
