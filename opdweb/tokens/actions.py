"""Creating and revoking tokens; each is audited in the same transaction."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from opdweb.refusals import Refused
from opdweb.teams import audit
from opdweb.teams.access import role_in
from opdweb.teams.models import Role
from opdweb.tokens.minting import HINT_LENGTH, digest_of, new_secret
from opdweb.tokens.models import ApiToken

MAX_TOKENS_PER_USER = 50


def check_token_request(user, team, name: str, can_write: bool) -> str:
    """The token's name, once the request is one the user may make: a name, a team the
    user is in, and writing only for a member or above (a token never exceeds its owner)."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise Refused("name the token (1 to 100 characters), e.g. the cluster or trainer it is for",
                      details=[{"field": "name", "message": "1 to 100 characters"}])
    role = role_in(user, team.pk)
    if role is None:
        raise Refused(f"you are not in team {team.slug}", status=403)
    if can_write and role < Role.MEMBER:
        raise Refused(f"a viewer of team {team.slug} can make read-only tokens only", status=403)
    if ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_TOKENS_PER_USER:
        raise Refused(f"you have {MAX_TOKENS_PER_USER} live tokens; revoke one first", status=409)
    return name


def do_create_token(*, user, team, name: str, can_write: bool) -> tuple[ApiToken, str]:
    """A new token and its secret, which the caller shows once: only its digest is kept."""
    name = check_token_request(user, team, name, can_write)
    secret = new_secret()
    with transaction.atomic():
        token = ApiToken.objects.create(user=user, team=team, name=name, can_write=can_write,
                                        digest=digest_of(secret), hint=secret[:HINT_LENGTH])
        audit.record(team, user, audit.TOKEN_CREATED, f"created {token.scope} API token {name!r} ({token.hint}…)",
                     subject="token", subject_id=token.pk, scope=token.scope)
    return token, secret


def do_revoke_token(*, token: ApiToken, actor) -> ApiToken:
    """Revoke ``token`` now; a request that carries it afterwards gets 401.  Revoking twice
    is refused (409) so the audit log holds one revocation."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token.pk)
        if token.is_revoked:
            raise Refused(f"token {token.name!r} was already revoked", status=409)
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit.record(token.team, actor, audit.TOKEN_REVOKED, f"revoked API token {token.name!r} ({token.hint}…)",
                     subject="token", subject_id=token.pk)
    return token
