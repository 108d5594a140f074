"""A person's chart layout, saved by the job page as they pin, hide and fold: the endpoint,
what it keeps, and what it refuses (a JSON 400, the stored layout unchanged)."""
import json

import pytest
from django.test import Client

from opdweb.jobs.models import ChartLayout, Job, JobState

URL = "/jobs/chart-layout/"


def post(client, body, **extra):
    return client.post(URL, body if isinstance(body, (str, bytes)) else json.dumps(body),
                       content_type="application/json", **extra)


def test_a_layout_is_the_persons_own_and_the_job_page_carries_it(member, make_user, client):
    user, team = member
    client.force_login(user)
    assert client.get(URL).json() == {"pinned": [], "hidden": [], "folded": []}
    saved = post(client, {"pinned": ["train/loss", "mismatch/*_k3", "train/loss"], "hidden": ["time/*_s"],
                          "folded": [""]})
    assert saved.status_code == 200
    assert saved.json() == {"pinned": ["mismatch/*_k3", "train/loss"], "hidden": ["time/*_s"], "folded": [""]}
    job = Job.objects.create(team=team, created_by=user, kind="train", state=JobState.SUCCEEDED, config={})
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    carried = page.split('<script id="chart-layout" type="application/json">', 1)[1].split("</script>", 1)[0]
    assert json.loads(carried) == saved.json()
    teammate = Client()
    teammate.force_login(make_user(team, 20))
    assert teammate.get(URL).json() == {"pinned": [], "hidden": [], "folded": []}  # not shared with the team
    assert post(client, {"hidden": []}).json() == {"pinned": [], "hidden": [], "folded": []}  # a save is whole


@pytest.mark.parametrize("body, words", [
    ("{", "not JSON"),
    ("[]", "layout"),
    ({"pinned": "train/loss"}, "pinned"),
    ({"pinned": [3]}, "pinned.0"),
    ({"hidden": ["a\u0000b"]}, "hidden.0"),
    ({"hidden": ["x" * 301]}, "at most 300"),
    ({"folded": ["s"] * 501}, "at most 500"),
    ({"colours": []}, "colours"),
])
def test_bad_layouts_are_refused_in_json_and_nothing_changes(member, client, body, words):
    user, _ = member
    client.force_login(user)
    post(client, {"pinned": ["train/loss"]})
    refused = post(client, body)
    assert refused.status_code == 400 and refused["Content-Type"] == "application/json"
    assert words in refused.json()["error"], refused.json()
    assert ChartLayout.objects.get(user=user).pinned == ["train/loss"]


def test_a_huge_layout_is_a_413_and_a_forged_one_a_403(member, client):
    user, _ = member
    client.force_login(user)
    assert post(client, {"pinned": ["x" * 200] * 400}).status_code == 413
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(user)
    assert post(forged, {"pinned": ["train/loss"]}).status_code == 403
    assert not ChartLayout.objects.filter(user=user).exists()
    anonymous = post(Client(), {"pinned": ["train/loss"]})
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    assert not ChartLayout.objects.exists()
