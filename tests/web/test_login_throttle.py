"""Login throttling (django-axes): five failures lock the account and the address for
15 minutes; others keep logging in."""
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.test import Client

from tests.web.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

ATTACKER = "203.0.113.7"
ELSEWHERE = "198.51.100.20"


def log_in(client, username, password, address):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def fail_five_times(client, username, address=ATTACKER):
    for _ in range(4):
        response = log_in(client, username, "wrong password", address)
        assert response.status_code == 200  # the login form again, with its error
    assert log_in(client, username, "wrong password", address).status_code == 429  # the fifth locks


def test_it_refuses_the_right_password_after_five_wrong_ones():
    alice = UserFactory()
    client = Client()
    fail_five_times(client, alice.username)
    response = log_in(client, alice.username, PASSWORD, ATTACKER)
    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed logins" in page and "locked after\n    5 failed attempts for 0:15:00" in page
    assert not logged_in(client)


def test_the_account_is_locked_from_another_address_too():
    alice = UserFactory()
    fail_five_times(Client(), alice.username)
    client = Client()
    assert log_in(client, alice.username, PASSWORD, ELSEWHERE).status_code == 429
    assert not logged_in(client)


def test_the_address_is_locked_for_another_account_too():
    alice, carol = UserFactory(), UserFactory()
    fail_five_times(Client(), alice.username)
    client = Client()
    assert log_in(client, carol.username, PASSWORD, ATTACKER).status_code == 429
    assert not logged_in(client)


def test_another_account_from_another_address_still_logs_in():
    alice, bob = UserFactory(), UserFactory()
    fail_five_times(Client(), alice.username)
    client = Client()
    response = log_in(client, bob.username, PASSWORD, ELSEWHERE)
    assert response.status_code == 302 and response["Location"] == "/jobs/"
    assert logged_in(client)


def test_four_failures_do_not_lock():
    alice = UserFactory()
    client = Client()
    for _ in range(4):
        log_in(client, alice.username, "wrong password", ATTACKER)
    assert log_in(client, alice.username, PASSWORD, ATTACKER).status_code == 302
    assert logged_in(client)


def test_the_lock_ends_after_15_minutes():
    alice = UserFactory()
    fail_five_times(Client(), alice.username)
    for attempt in AccessAttempt.objects.all():
        attempt.attempt_time -= timedelta(minutes=15, seconds=1)
        attempt.save(update_fields=["attempt_time"])
    client = Client()
    assert log_in(client, alice.username, PASSWORD, ATTACKER).status_code == 302
    assert logged_in(client)
