"""``Authorization: Bearer <token>`` beside the session.

A request that carries the header is authenticated by the token alone (a session cookie
beside it is ignored), needs no CSRF token (a browser never adds the header to a forged
request) and acts as the token's owner inside the token's one team: the team rule of
:mod:`opdweb.teams.access` reads ``user.api_token``.  A read-only token cannot write, and
a token's writes are rate-limited (:mod:`.rate_limit`).  Each refusal says why: no such
token, revoked, an owner no longer in the team, read-only, too many writes.
"""
from __future__ import annotations

from datetime import timedelta

from django.db.models import OuterRef, Subquery
from django.utils import timezone

from opdweb.refusals import Refused
from opdweb.teams.models import Membership, Role
from opdweb.tokens import rate_limit
from opdweb.tokens.minting import PREFIX, digest_of
from opdweb.tokens.models import ApiToken

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="opdweb"'}
# last_used_at is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def unauthenticated(message: str) -> Refused:
    return Refused(message, status=401, headers=CHALLENGE)


def bearer_token(request) -> ApiToken | None:
    """The live token the request carries, or None without an ``Authorization`` header;
    raises :class:`Refused` (401 / 403) saying why a token is not accepted."""
    header = request.META.get("HTTP_AUTHORIZATION")
    if header is None:
        return None
    scheme, _, secret = header.strip().partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise unauthenticated(f"the Authorization header must be 'Bearer <token>' with an opdweb API token "
                              f"({PREFIX}…, made on /tokens/)")
    return token_of_secret(secret)


def token_of_secret(secret: str) -> ApiToken:
    """The live token whose secret this is; raises :class:`Refused` (401 / 403) saying why
    it is not accepted."""
    if not secret.startswith(PREFIX):
        raise unauthenticated(f"that is not an opdweb API token (they start with {PREFIX!r}; make one on /tokens/)")
    return live_token(digest=digest_of(secret))


def live_token(**lookup) -> ApiToken:
    """The token ``lookup`` finds, with its owner's role in its team, if it is still good;
    raises :class:`Refused` (401 / 403) saying why not."""
    # One query: the token, its owner, its team and the owner's role there (None: not in it).
    role = Membership.objects.filter(team=OuterRef("team"), user=OuterRef("user")).values("role")[:1]
    token = ApiToken.objects.select_related("user", "team").annotate(owner_role=Subquery(role)).filter(**lookup).first()
    if token is None:
        raise unauthenticated("unknown API token: no token has this secret (a typo, or one from another server?)")
    if token.is_revoked:
        raise unauthenticated(f"API token {token.name!r} was revoked at {token.revoked_at:%Y-%m-%d %H:%M} UTC")
    if not token.user.is_active:
        raise unauthenticated(f"API token {token.name!r} belongs to a deactivated account")
    if token.owner_role is None:
        raise Refused(f"API token {token.name!r} is for team {token.team.slug}, which its owner is no longer in",
                      status=403)
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def check_write(token: ApiToken) -> None:
    """Refuse a write the token may not make (403), or one over its rate (429)."""
    if not token.can_write:
        raise Refused(f"API token {token.name!r} is read-only; writing needs a read-write token", status=403)
    role = getattr(token, "owner_role", None)  # as read with the token, by bearer_token
    if role is None or role < Role.MEMBER:
        raise Refused(f"the owner of API token {token.name!r} is a viewer of team {token.team.slug} "
                      "and cannot write there", status=403)
    rate_limit.take_write(token.pk)


def authenticate_bearer(request, writing: bool) -> bool:
    """Authenticate ``request`` by its bearer token, if it carries one: ``request.user``
    becomes the token's owner, confined to the token's team.  Returns whether it did;
    raises :class:`Refused` for a token that is not accepted, or a write it may not make."""
    token = bearer_token(request)
    if token is None:
        return False
    if writing:
        check_write(token)
    user = token.user
    user.api_token = token
    request.user = user
    return True


def request_token(request) -> ApiToken | None:
    """The token that authenticated ``request`` (None: a session, or nobody)."""
    return getattr(getattr(request, "user", None), "api_token", None)
