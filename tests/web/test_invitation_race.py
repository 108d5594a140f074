"""Invitations of one user name sent at once, from threads on connections of their own
against the real database: exactly one account is made, whatever the case each spells
it in, and every other invitation is refused as "taken" (409), never a 500."""
import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models.functions import Lower

from opdweb.refusals import Refused
from opdweb.teams.actions import do_invite_user
from opdweb.teams.models import Role
from tests.web.factories import MembershipFactory

INVITERS = 6


def invite_at_once(team, admin, spellings: list[str]) -> list:
    """Each spelling invited from its own thread, all released together; returns what
    each got: a membership, or the exception it raised."""
    barrier = threading.Barrier(len(spellings))
    outcomes: list = [None] * len(spellings)

    def invite(i: int, name: str) -> None:
        try:
            barrier.wait(timeout=60)
            outcomes[i] = do_invite_user(team=team, actor=admin, username=name, role=Role.MEMBER)[0]
        except Exception as exc:  # noqa: BLE001 - the test reports whatever each got
            outcomes[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=invite, args=(i, name)) for i, name in enumerate(spellings)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return outcomes


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("trial", range(4))
def test_concurrent_invitations_of_one_name_make_one_account_and_refuse_the_rest(trial):
    admin_membership = MembershipFactory(role=Role.ADMIN)
    team, admin = admin_membership.team, admin_membership.user
    name = f"race{trial}"
    spellings = [name, name.upper(), name, name.capitalize(), name, name.upper()][:INVITERS]
    outcomes = invite_at_once(team, admin, spellings)
    accounts = get_user_model().objects.annotate(low=Lower("username")).filter(low=name)
    assert accounts.count() == 1, [a.username for a in accounts]
    made = [o for o in outcomes if not isinstance(o, Exception)]
    refused = [o for o in outcomes if isinstance(o, Refused)]
    assert len(made) == 1 and len(refused) == INVITERS - 1, outcomes
    assert all(r.status == 409 and r.details == [{"field": "username", "message": "taken"}] for r in refused)
    assert made[0].user == accounts.get()
