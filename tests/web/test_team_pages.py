"""Team pages: admins manage members and roles in the product; a team always keeps an
admin; every change is in the audit log; styled 404 / 403 pages with navigation."""
import pytest
from django.contrib.auth import get_user_model
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


def test_an_admin_invites_a_new_user_who_sets_a_password_once_and_logs_in(team_admin):
    team, admin = team_admin
    response = logged_in(admin).post(f"/teams/{team.slug}/invitations/", {"username": "newbie", "role": Role.MEMBER})
    assert response.status_code == 200
    link = response.content.decode().split('id="invite-link" readonly size="80" value="', 1)[1].split('"', 1)[0]
    assert link.startswith("http://testserver/set-password/")
    newbie = Membership.objects.get(team=team, user__username="newbie")
    assert newbie.role == Role.MEMBER and not newbie.user.has_usable_password()
    entry = AuditEntry.objects.get(team=team, action="member.invited")
    assert entry.actor == admin and entry.detail == {"user": "newbie", "role": "member"}

    visitor = Client()  # the invitee, not logged in
    form = visitor.get(link.removeprefix("http://testserver"), follow=True)
    assert form.status_code == 200 and 'id="set-password"' in form.content.decode()
    done = visitor.post(form.redirect_chain[-1][0], {"new_password1": "a long pass phrase 9",
                                                     "new_password2": "a long pass phrase 9"})
    assert done.status_code == 302 and done["Location"] == "/login/"
    login = Client().post("/login/", {"username": "newbie", "password": "a long pass phrase 9"})
    assert login.status_code == 302, login.content  # logged in with the password they chose
    again = Client().get(link.removeprefix("http://testserver"), follow=True)
    assert 'id="link-invalid"' in again.content.decode()  # one time only


def test_invitations_are_for_admins_and_new_names_only(team_admin):
    team, admin = team_admin
    member = MembershipFactory(team=team, role=Role.MEMBER)
    before = get_user_model().objects.count()
    assert logged_in(member.user).post(f"/teams/{team.slug}/invitations/", {"username": "x", "role": 10}
                                       ).status_code == 403
    for data, status, words in [({"username": member.user.username.upper(), "role": 10}, 409, "already has an account"),
                                ({"username": "bad name!", "role": 10}, 400, "username &#x27;bad name!&#x27;"),
                                ({"username": "", "role": 10}, 400, "a username is required"),
                                ({"username": "fine", "role": "99"}, 400, "role must be one of")]:
        response = logged_in(admin).post(f"/teams/{team.slug}/invitations/", data)
        assert response.status_code == status and words in response.content.decode(), (data, response.content)
    assert get_user_model().objects.count() == before and not AuditEntry.objects.filter(action="member.invited")


def test_a_refusal_whose_page_cannot_be_drawn_gets_the_refusal_page(team_admin):
    team, admin = team_admin
    response = logged_in(admin).post(f"/teams/{team.slug}/members/", {"username": "nobody-by-that-name", "role": 20},
                                     HTTP_REFERER="http://testserver/jobs/999999/")  # a page that is a 404 now
    assert response.status_code == 400 and 'class="card problem"' in response.content.decode()
