"""The compare page: parameter diff, metrics side by side, shared curves, and refusals."""
import pytest

from opdweb.jobs.models import Job, JobState
from opdweb.traces.models import TraceSeries
from opdweb.traces.sink import TraceSink
from tests.web.factories import MembershipFactory, TeamFactory


@pytest.fixture
def two_checks(member):
    user, team = member
    bf16 = Job.objects.create(team=team, created_by=user, kind="mismatch", name="bf16", state=JobState.SUCCEEDED,
                              config={"model": "/m/s", "rollout": {"weights": "bf16", "seed": 1}, "prompts": 64},
                              result={"multiple": 1.0, "multiple_ci": [0.9, 1.1], "accuracy": 0.5, "tokens": 100})
    fp8 = Job.objects.create(team=team, created_by=user, kind="mismatch", name="fp8", state=JobState.SUCCEEDED,
                             config={"model": "/m/s", "rollout": {"weights": "fp8_e4m3", "seed": 1, "kv_cache": "fp8"}},
                             result={"multiple": 3.25, "multiple_ci": [2.5, 4.0], "accuracy": 0.48, "tokens": 100})
    for job in (bf16, fp8):
        TraceSeries.objects.create(job=job, key="mismatch/k3", first_step=0, last_step=3)
    TraceSeries.objects.create(job=fp8, key="mismatch/rollout_k3", first_step=0, last_step=3)
    return user, bf16, fp8


def rows(response, table: str) -> dict[str, list[str]]:
    return {row["key"]: row["values"] for row in response.context[table]}


def test_it_diffs_flattened_parameters(two_checks, client):
    user, bf16, fp8 = two_checks
    client.force_login(user)
    response = client.get(f"/jobs/compare/?ids={bf16.pk},{fp8.pk}")
    assert response.status_code == 200
    params = rows(response, "parameters")
    assert params == {
        "kind": ['"mismatch"', '"mismatch"'],
        "model": ['"/m/s"', '"/m/s"'],
        "prompts": ["64", "—"],
        "rollout.kv_cache": ["—", '"fp8"'],
        "rollout.seed": ["1", "1"],
        "rollout.weights": ['"bf16"', '"fp8_e4m3"'],
    }
    differing = {row["key"] for row in response.context["parameters"] if row["differs"]}
    assert differing == {"prompts", "rollout.kv_cache", "rollout.weights"}
    only = client.get(f"/jobs/compare/?ids={bf16.pk},{fp8.pk}&diff=1").content.decode()
    assert 'data-key="rollout.weights"' in only and 'data-key="rollout.seed"' not in only
    assert 'data-key="rollout.seed"' in response.content.decode()


def test_it_puts_metrics_side_by_side_and_overlays_shared_keys(two_checks, client):
    user, bf16, fp8 = two_checks
    client.force_login(user)
    response = client.get(f"/jobs/compare/?ids={fp8.pk},{bf16.pk}")
    assert rows(response, "metrics") == {"multiple": ["3.25", "1"], "multiple_ci": ["[2.5, 4]", "[0.9, 1.1]"],
                                         "tokens": [100, 100], "accuracy": ["0.48", "0.5"]}
    assert response.context["trace_keys"] == ["mismatch/k3"]  # the rollout key only one job has is not overlaid
    assert f'data-ids="{fp8.pk},{bf16.pk}"' in response.content.decode()


def test_each_job_reads_the_shared_keys_it_has_in_one_batch(member, client):
    """A has k1, k2; B has k1; C has k2, k3: k1 and k2 are overlaid, k3 (C's alone) is not.
    Each job's curves come in one batched read of exactly the shared keys it has, which the
    API answers."""
    from urllib.parse import parse_qs, urlsplit

    user, team = member
    jobs = {name: Job.objects.create(team=team, created_by=user, kind="mismatch", name=name, state=JobState.SUCCEEDED,
                                     config={})
            for name in "ABC"}
    for name, keys in {"A": ["k1", "k2"], "B": ["k1"], "C": ["k2", "k3"]}.items():
        for key in keys:
            TraceSeries.objects.create(job=jobs[name], key=key, first_step=0, last_step=0)
    client.force_login(user)
    response = client.get("/jobs/compare/?ids=" + ",".join(str(jobs[n].pk) for n in "ABC"))
    assert response.context["trace_keys"] == ["k1", "k2"]
    reads = response.context["trace_reads"]
    asked = {name: [parse_qs(urlsplit(url).query)["key"] for url in reads[jobs[name].pk]] for name in "ABC"}
    assert asked == {"A": [["k1", "k2"]], "B": [["k1"]], "C": [["k2"]]}
    for name in "ABC":
        (url,) = reads[jobs[name].pk]
        assert urlsplit(url).path == f"/api/jobs/{jobs[name].pk}/series/batch"
        answer = client.get(url)
        assert answer.status_code == 200 and [s["key"] for s in answer.json()["series"]] == asked[name][0]
    assert 'id="compare-reads"' in response.content.decode()


def test_repeated_ids_parameters_are_accepted_from_the_list_form(two_checks, client):
    user, bf16, fp8 = two_checks
    client.force_login(user)
    response = client.get(f"/jobs/compare/?ids={bf16.pk}&ids={fp8.pk}")
    assert [job.pk for job in response.context["jobs"]] == [bf16.pk, fp8.pk]


def test_another_teams_job_is_a_404(two_checks, client):
    user, bf16, _ = two_checks
    theirs = Job.objects.create(team=MembershipFactory(team=TeamFactory()).team, kind="selftest", config={})
    client.force_login(user)
    assert client.get(f"/jobs/compare/?ids={bf16.pk},{theirs.pk}").status_code == 404
    assert client.get(f"/jobs/compare/?ids={bf16.pk},999999").status_code == 404


@pytest.mark.parametrize("ids, message", [
    ("", "at least 2 jobs"),
    ("{a}", "at least 2 jobs"),
    ("{a},{a}", "at least 2 jobs"),
    ("{a},abc", "whole numbers"),
    ("{a},-3", "whole numbers"),
    ("{a},1e5", "whole numbers"),
    ("{a}," + "9" * 40, "whole numbers"),
    (",".join(str(i) for i in range(1, 12)), "at most 10 jobs"),
])
def test_bad_ids_are_a_clear_400(two_checks, client, ids, message):
    user, bf16, _ = two_checks
    client.force_login(user)
    response = client.get(f"/jobs/compare/?ids={ids.format(a=bf16.pk)}")
    assert response.status_code == 400
    assert message in response.content.decode()


def test_runs_without_results_compare_on_their_curves_last_min_and_max(member, client):
    """Two MLflow runs (no result of their own): each shared key's last value, min and max,
    known by hand; a NaN logged is the max (NaN orders above every number, as in the bands)."""
    user, team = member
    runs = [Job.objects.create(team=team, created_by=user, kind="external", name=f"run {i}",
                               state=JobState.SUCCEEDED, config={}, result=None) for i in (1, 2)]
    curves = {runs[0].pk: [0.9, 0.4, float("nan"), 0.2, 0.3], runs[1].pk: [1.5, 2.0 ** 21, -7.0]}
    for run in runs:
        sink = TraceSink(run.pk)
        values = curves[run.pk]
        steps = [0, 1, 2, 3, 4] if run is runs[0] else [0, 2_000_000, 3_000_000]  # across top-level buckets
        sink.add_many("train/loss", steps, values, [1.7e9 + s for s in range(len(values))])
        sink.close()
    client.force_login(user)
    response = client.get(f"/jobs/compare/?ids={runs[0].pk},{runs[1].pk}")
    assert rows(response, "series_rows") == {"train/loss": ["0.3 (min 0.2, max nan)",
                                                            "-7 (min -7, max 2.097e+06)"]}
    assert '<tr data-series="train/loss">' in response.content.decode()
