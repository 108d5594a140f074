"""Team pages: admins manage members and roles in the product; a team always keeps an
admin; every change is in the audit log; styled 404 / 403 pages with navigation."""
import pytest
from django.test import Client

from opdweb.teams.models import AuditEntry, Membership, Role
from tests.web.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def team_admin():
    m = MembershipFactory(role=Role.ADMIN)
    return m.team, m.user


def test_an_admin_adds_a_member_changes_the_role_and_removes_them(team_admin):
    team, admin = team_admin
    client = logged_in(admin)
    newcomer = UserFactory()
    response = client.post(f"/teams/{team.slug}/members/", {"username": newcomer.username, "role": Role.VIEWER})
    assert response.status_code == 302 and response["Location"] == f"/teams/{team.slug}/"
    membership = Membership.objects.get(team=team, user=newcomer)
    assert membership.role == Role.VIEWER
    client.post(f"/teams/{team.slug}/members/{membership.pk}/role/", {"role": Role.APPROVER})
    membership.refresh_from_db()
    assert membership.role == Role.APPROVER
    client.post(f"/teams/{team.slug}/members/{membership.pk}/remove/")
    assert not Membership.objects.filter(team=team, user=newcomer).exists()
    actions = list(AuditEntry.objects.filter(team=team).order_by("id").values_list("action", "summary"))
    assert actions == [("member.added", f"added {newcomer.username} as viewer"),
                       ("member.role_changed", f"changed {newcomer.username} from viewer to approver"),
                       ("member.removed", f"removed {newcomer.username}")]
    page = client.get(f"/teams/{team.slug}/audit/")
    assert page.status_code == 200 and f"removed {newcomer.username}" in page.content.decode()


def test_the_last_admin_cannot_be_demoted_or_removed(team_admin):
    team, admin = team_admin
    client = logged_in(admin)
    mine = Membership.objects.get(team=team, user=admin)
    response = client.post(f"/teams/{team.slug}/members/{mine.pk}/role/", {"role": Role.MEMBER})
    assert response.status_code == 409 and "last admin" in response.content.decode()
    response = client.post(f"/teams/{team.slug}/members/{mine.pk}/remove/")
    assert response.status_code == 409
    mine.refresh_from_db()
    assert mine.role == Role.ADMIN and AuditEntry.objects.count() == 0
    # With a second admin, stepping down is allowed.
    MembershipFactory(team=team, role=Role.ADMIN)
    client.post(f"/teams/{team.slug}/members/{mine.pk}/role/", {"role": Role.MEMBER})
    mine.refresh_from_db()
    assert mine.role == Role.MEMBER


def test_bad_member_input_is_refused_and_changes_nothing(team_admin):
    team, admin = team_admin
    client = logged_in(admin)
    existing = MembershipFactory(team=team, role=Role.MEMBER)
    cases = [({"username": "nobody-by-that-name", "role": Role.MEMBER}, 400, "no user named"),
             ({"username": existing.user.username, "role": Role.VIEWER}, 409, "already in team"),
             ({"username": UserFactory().username, "role": "99"}, 400, "role must be one of")]
    for data, status, words in cases:
        response = client.post(f"/teams/{team.slug}/members/", data)
        assert response.status_code == status and words in response.content.decode(), data
    assert Membership.objects.filter(team=team).count() == 2 and AuditEntry.objects.count() == 0
    other = MembershipFactory(team=TeamFactory())
    response = client.post(f"/teams/{team.slug}/members/{other.pk}/remove/")
    assert response.status_code == 404 and Membership.objects.filter(pk=other.pk).exists()


def test_only_admins_manage_and_outsiders_see_nothing(team_admin):
    team, admin = team_admin
    target = MembershipFactory(team=team, role=Role.MEMBER)
    for role in (Role.VIEWER, Role.MEMBER, Role.APPROVER):
        client = logged_in(MembershipFactory(team=team, role=role).user)
        assert client.get(f"/teams/{team.slug}/").status_code == 200
        response = client.post(f"/teams/{team.slug}/members/{target.pk}/role/", {"role": Role.ADMIN})
        assert response.status_code == 403, role
        assert "needs admin" in response.content.decode()
    target.refresh_from_db()
    assert target.role == Role.MEMBER
    outsider = logged_in(MembershipFactory().user)
    for url in (f"/teams/{team.slug}/", f"/teams/{team.slug}/audit/", f"/teams/{team.slug}/webhook/"):
        assert outsider.get(url).status_code == 404, url


def test_not_found_and_not_allowed_pages_are_styled_with_navigation(team_admin):
    team, admin = team_admin
    client = logged_in(MembershipFactory(team=team, role=Role.VIEWER).user)
    response = client.get("/no/such/page/")
    html = response.content.decode()
    assert response.status_code == 404
    assert 'class="topbar"' in html and 'href="/teams/"' in html and "Not found" in html
    response = client.get(f"/teams/{team.slug}/webhook/")
    html = response.content.decode()
    assert response.status_code == 403 and 'class="topbar"' in html and "Not allowed" in html


def test_adding_an_unknown_member_redraws_the_team_page_with_the_input_kept(team_admin):
    team, admin = team_admin
    response = logged_in(admin).post(f"/teams/{team.slug}/members/", {"username": "nobody-by-that-name",
                                                                       "role": Role.APPROVER},
                                     HTTP_REFERER=f"http://testserver/teams/{team.slug}/")
    html = response.content.decode()
    assert response.status_code == 400 and 'id="members"' in html  # the team page itself
    assert html.count("no user named") == 1 and 'id="refusal"' in html
    assert 'value="nobody-by-that-name"' in html
    assert f'<option value="{Role.APPROVER.value}" selected>' in html  # the role chosen, not the default
    assert Membership.objects.filter(team=team).count() == 1
