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
    ("children=yes", "children: &#x27;yes&#x27; is not a choice"),
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


@pytest.fixture
def calibration_with_children(planted):
    """'Budget sweep' gets three child runs (two done), each with a result written out by hand."""
    alice, jobs = planted
    parent = jobs["Budget sweep"]
    for key, state, result in [
        ("noise-10", "succeeded", {"multiple": 9.96, "sigma": 0.01}),
        ("train-baseline-s0", "succeeded", {"final_accuracy": 0.7631, "start_accuracy": 0.37}),
        ("train-10x-s0", "running", None),
    ]:
        Job.objects.create(team=parent.team, created_by=alice, parent=parent, child_key=key, kind="train",
                           name=f"Budget sweep: {key.replace('-', ' ')}", state=state, config={}, result=result)
    return alice, jobs


def test_child_jobs_fold_under_their_parent(calibration_with_children, client):
    alice, jobs = calibration_with_children
    client.force_login(alice)
    folded = client.get("/jobs/")
    assert names(folded) == ["Budget sweep", "smoke", "fp8 weights", "layers", "fp8 kv"]
    assert "2/3 child jobs done" in folded.content.decode()
    shown = names(client.get("/jobs/?children=shown"))
    assert len(shown) == 8 and "Budget sweep: train baseline s0" in shown


def test_the_result_column_says_each_result_in_a_few_words(planted, client):
    alice, jobs = planted
    results = {
        "fp8 weights": ({"multiple": 8.5432, "multiple_ci": [7.1, 9.9]}, "8.54×"),
        "smoke": ({"final_accuracy": 0.7631}, "accuracy 76.3 %"),
        "fp8 kv": ({"verdict": "pass", "multiple": 33.81, "budget": {"budget": 1054.3}}, "pass at 33.8×"),
        "layers": ({"status": "not_reached", "budget": 85916.811}, "budget ≥ 85,900× (not reached)"),
        "Budget sweep": ({"status": "uninformative", "budget": None}, "uninformative: no budget"),
    }
    # A result that names its unit pair says it beside the multiple (a measurement's unit, a budget's fields).
    paired = {
        "fp8 weights": ({"multiple": 12.0, "unit": {"engine": "vllm", "dtype": "bf16", "trainer": "bf16"}},
                        "12× (vllm BF16 engine / bf16 trainer)"),
        "layers": ({"status": "reached", "budget": 40.0, "unit_engine": "hf"},
                   "budget 40× (hf BF16 engine / fp32 trainer)"),
    }
    for name, (result, _) in results.items():
        Job.objects.filter(pk=jobs[name].pk).update(result=result)
    client.force_login(alice)
    page = client.get("/jobs/").content.decode()
    for name, (_, words) in results.items():
        row = page.split(f'data-job-id="{jobs[name].pk}"', 1)[1].split("</tr>", 1)[0]
        assert f'<td class="result">{words}</td>' in row, (name, row)
    for name, (result, _) in paired.items():
        Job.objects.filter(pk=jobs[name].pk).update(result=result)
    page = client.get("/jobs/").content.decode()
    for name, (_, words) in paired.items():
        row = page.split(f'data-job-id="{jobs[name].pk}"', 1)[1].split("</tr>", 1)[0]
        assert f'<td class="result">{words}</td>' in row, (name, row)


def test_a_parents_children_are_served_with_their_summaries(calibration_with_children, client):
    alice, jobs = calibration_with_children
    client.force_login(alice)
    rows = client.get(f"/api/jobs/{jobs['Budget sweep'].pk}/children").json()
    assert [(r["key"], r["label"], r["state"], r["summary"]) for r in rows] == [
        ("noise-10", "noise 10", "succeeded", "9.96×"),
        ("train-baseline-s0", "train baseline s0", "succeeded", "accuracy 76.3 %"),
        ("train-10x-s0", "train 10x s0", "running", ""),
    ]
    page = client.get(f"/jobs/{jobs['Budget sweep'].pk}/").content.decode()
    assert 'id="child-table"' in page and "accuracy 76.3 %" in page
    client.force_login(Job.objects.get(pk=jobs["theirs"].pk).created_by)
    assert client.get(f"/api/jobs/{jobs['Budget sweep'].pk}/children").status_code == 404


def test_a_run_without_a_result_says_its_newest_step_and_its_series(member, client):
    """An MLflow or W&B run has no result: its cell says how far its curves go."""
    from opdweb.traces.models import TraceSeries

    user, team = member
    run = Job.objects.create(team=team, created_by=user, kind="external", name="mlflow run", state="running",
                             config={}, result=None)
    for key, last in [("train/loss", 1200), ("eval/accuracy", 1000), ("lr", 1250)]:
        TraceSeries.objects.create(job=run, key=key, first_step=0, last_step=last)
    bare = Job.objects.create(team=team, created_by=user, kind="external", name="empty run", state="running",
                              config={}, result=None)
    client.force_login(user)
    page = client.get("/jobs/").content.decode()
    row = page.split(f'data-job-id="{run.pk}"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="result">step 1,250 · 3 series</td>' in row, row
    empty = page.split(f'data-job-id="{bare.pk}"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="result"></td>' in empty, empty
