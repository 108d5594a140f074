"""The job list page: filters, sorting, pagination and bad input, against jobs planted by
hand (the expected rows are written out, not computed by the code under test)."""
from datetime import datetime, timedelta, timezone

import pytest

from opdweb.jobs.models import Job
from tests.web.factories import MembershipFactory, TeamFactory, UserFactory

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def planted(db):
    """Five jobs of one team by two people, and one of another team."""
    team, other = TeamFactory(slug="red"), TeamFactory(slug="blue")
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    MembershipFactory(team=team, user=alice)
    MembershipFactory(team=team, user=bob)
    rows = [  # name, kind, state, model, by, minutes after T0
        ("fp8 weights", "mismatch", "succeeded", "/models/qwen-a", alice, 3),
        ("fp8 kv", "mismatch", "failed", "/models/qwen-b", bob, 1),
        ("Budget sweep", "calibration", "running", "/models/qwen-a", alice, 5),
        ("layers", "sensitivity", "queued", "/models/llama", bob, 2),
        ("smoke", "selftest", "succeeded", None, alice, 4),
    ]
    jobs = {}
    for name, kind, state, model, by, minutes in rows:
        config = {"model": model} if model else {"steps": 3}
        job = Job.objects.create(team=team, created_by=by, name=name, kind=kind, state=state, config=config)
        Job.objects.filter(pk=job.pk).update(created_at=T0 + timedelta(minutes=minutes))
        jobs[name] = job
    stranger = UserFactory(username="carol")
    MembershipFactory(team=other, user=stranger)
    jobs["theirs"] = Job.objects.create(team=other, created_by=stranger, name="fp8 theirs", kind="mismatch",
                                        config={"model": "/models/qwen-a"})
    return alice, jobs


def names(response) -> list[str]:
    assert response.status_code == 200
    return [job.name for job in response.context["jobs"]]


def test_it_lists_own_team_newest_first(planted, client):
    alice, _ = planted
    client.force_login(alice)
    newest_first = ["Budget sweep", "smoke", "fp8 weights", "layers", "fp8 kv"]
    assert names(client.get("/jobs/")) == newest_first
    assert names(client.get("/jobs/?sort=&kind=&q=")) == newest_first  # empty fields from the form: no filter


@pytest.mark.parametrize("query, expected", [
    ("kind=mismatch", {"fp8 weights", "fp8 kv"}),
    ("state=succeeded", {"fp8 weights", "smoke"}),
    ("model=qwen-a", {"fp8 weights", "Budget sweep"}),
    ("model=QWEN", {"fp8 weights", "fp8 kv", "Budget sweep"}),
    ("user=bob", {"fp8 kv", "layers"}),
    ("q=fp8", {"fp8 weights", "fp8 kv"}),
    ("q=budget", {"Budget sweep"}),
    ("kind=mismatch&user=alice", {"fp8 weights"}),
    ("kind=selftest&state=failed", set()),
])
def test_it_filters_exactly_the_planted_jobs(planted, client, query, expected):
    alice, _ = planted
    client.force_login(alice)
    assert set(names(client.get(f"/jobs/?{query}"))) == expected


@pytest.mark.parametrize("sort, expected", [
    ("name", ["Budget sweep", "fp8 kv", "fp8 weights", "layers", "smoke"]),
    ("-name", ["smoke", "layers", "fp8 weights", "fp8 kv", "Budget sweep"]),
    ("kind", ["Budget sweep", "fp8 weights", "fp8 kv", "smoke", "layers"]),  # ties in id order
    ("created", ["fp8 kv", "layers", "fp8 weights", "smoke", "Budget sweep"]),
    ("state", ["fp8 kv", "layers", "Budget sweep", "fp8 weights", "smoke"]),
    ("user", ["fp8 weights", "Budget sweep", "smoke", "fp8 kv", "layers"]),
    ("id", ["fp8 weights", "fp8 kv", "Budget sweep", "layers", "smoke"]),
    ("-id", ["smoke", "layers", "Budget sweep", "fp8 kv", "fp8 weights"]),
])
def test_it_sorts_by_any_column(planted, client, sort, expected):
    alice, _ = planted
    client.force_login(alice)
    assert names(client.get(f"/jobs/?sort={sort}")) == expected


def test_the_url_holds_the_view(planted, client):
    alice, _ = planted
    client.force_login(alice)
    page = client.get("/jobs/?kind=mismatch&sort=name").content.decode()
    # Column links keep the filters and flip the order of the current column.
    assert 'href="?kind=mismatch&amp;sort=-name"' in page
    assert 'href="?kind=mismatch&amp;sort=created"' in page
    assert '<option selected>mismatch</option>' in page
    assert f'href="/jobs/new/?clone={planted[1]["fp8 kv"].pk}"' in page


def test_it_pages_fifty_at_a_time(planted, client):
    alice, jobs = planted
    team = jobs["smoke"].team
    Job.objects.bulk_create([Job(team=team, created_by=alice, name=f"bulk {i:03}", kind="selftest", config={})
                             for i in range(120)])
    client.force_login(alice)
    first = client.get("/jobs/?q=bulk&sort=name")
    assert first.context["page"].paginator.count == 120
    assert names(first) == [f"bulk {i:03}" for i in range(50)]
    assert 'href="?q=bulk&amp;sort=name&amp;page=2"' in first.content.decode()
    third = client.get("/jobs/?q=bulk&sort=name&page=3")
    assert names(third) == [f"bulk {i:03}" for i in range(100, 120)]
    assert "page 3 of 3" in third.content.decode()
    # A page past the end or not a number shows the last or the first page.
    assert names(client.get("/jobs/?q=bulk&sort=name&page=99"))[0] == "bulk 100"
    assert names(client.get("/jobs/?q=bulk&sort=name&page=x"))[0] == "bulk 000"


@pytest.mark.parametrize("query, message", [
    ("sort=colour", "cannot sort by &#x27;colour&#x27;"),
    ("sort=-", "cannot sort by"),
    ("state=done", "unknown state &#x27;done&#x27;"),
    ("kind=nope", "unknown kind &#x27;nope&#x27;"),
])
def test_bad_input_is_a_clear_400(planted, client, query, message):
    alice, _ = planted
    client.force_login(alice)
    response = client.get(f"/jobs/?{query}")
    assert response.status_code == 400
    assert message in response.content.decode()


def test_other_teams_jobs_never_show(planted, client):
    alice, jobs = planted
    client.force_login(alice)
    assert "fp8 theirs" not in names(client.get("/jobs/?q=fp8"))
    assert "carol" not in client.get("/jobs/").content.decode()  # not offered as a user either
