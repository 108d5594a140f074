"""The admin's team webhook form never shows the signing secret: it is a password field
left empty, and saving with it empty keeps the secret; a view-only staff user does not
see it either."""
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from opdweb.approvals.models import TeamWebhook
from tests.web.factories import TeamFactory

pytestmark = pytest.mark.django_db

SECRET = "whsec-correct-horse-battery-staple-0123456789"


@pytest.fixture
def webhook():
    return TeamWebhook.objects.create(team=TeamFactory(), url="https://93.184.216.34/hook", secret=SECRET)


def admin_client() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw-root-123"))
    return client


def change_url(webhook) -> str:
    return f"/admin/approvals/teamwebhook/{webhook.pk}/change/"


def test_the_change_form_does_not_show_the_secret(webhook):
    page = admin_client().get(change_url(webhook))
    assert page.status_code == 200
    html = page.content.decode()
    assert SECRET not in html and SECRET[:12] not in html
    assert 'type="password"' in html and 'name="secret"' in html


def test_saving_with_the_secret_left_empty_keeps_it_and_a_new_one_replaces_it(webhook):
    client = admin_client()
    form = {"team": webhook.team_id, "url": "https://93.184.216.34/other", "secret": ""}
    assert client.post(change_url(webhook), form).status_code == 302
    webhook.refresh_from_db()
    assert (webhook.url, webhook.secret) == ("https://93.184.216.34/other", SECRET)
    assert client.post(change_url(webhook), {**form, "secret": "a-new-secret"}).status_code == 302
    webhook.refresh_from_db()
    assert webhook.secret == "a-new-secret"


def test_a_new_webhook_needs_a_secret():
    team = TeamFactory()
    response = admin_client().post("/admin/approvals/teamwebhook/add/",
                                   {"team": team.pk, "url": "https://93.184.216.34/hook", "secret": ""})
    assert response.status_code == 200 and not TeamWebhook.objects.exists()


def test_a_view_only_staff_user_does_not_see_the_secret(webhook):
    viewer = get_user_model().objects.create_user("viewer", password="pw-viewer-123", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_teamwebhook"))
    client = Client()
    client.force_login(viewer)
    page = client.get(change_url(webhook))
    assert page.status_code == 200 and SECRET not in page.content.decode()
