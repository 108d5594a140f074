"""Watching a linked run against its budget as its points arrive: a recorded verl stream
replayed through the MLflow path crosses a planted budget at a known step and exactly one
signed delivery reaches a real HTTP receiver (signature checked here with hmac); the
approval says breached at that step and so does its next export; no second alert while it
stays above; the ESS floor, the growth rate and silence; the re-check button; the
approval page's run list; the budget between calibrated steps by hand."""
import hashlib
import hmac
import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import yaml
from django.test import Client
from django.utils import timezone

from opdweb.approvals.models import ApprovalRequest, TeamWebhook, WebhookDelivery
from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.models import Job
from opdweb.rollouts.actions import do_create_config
from opdweb.runs.models import Alert, MlflowRun, WatchRule
from opdweb.runs.silence import do_check_silent_runs
from opdweb.runs.watch import budget_points
from opdweb.teams.models import AuditEntry, Role
from opdweb.tokens.actions import do_create_token
from tests.web.approval_world import admission_job, make_checkpoint
from tests.web.conftest import wait_for
from tests.web.factories import MembershipFactory, TeamFactory
from tests.web.test_mlflow_endpoints import Tracking, metric
from tests.web.test_webhooks import SECRET, allowed_host, receiver  # noqa: F401 (the fixture)
from workers.science.fingerprint import checkpoint_digest
from workers.science.verdicts import budget_at

UNIT_K3 = 0.002  # the BF16 unit's k3 on the checkpoint, as the planted budget's calibration measured it
BUDGET = 50.0  # the planted budget, x BF16
CROSSING_STEP = 30  # the stream's multiple is 20.5 + step: 49.5 at step 29, 50.5 at step 30
# verl's FP8 rollout engine as its export writes it
FP8 = {"weights": "fp8_e4m3", "weight_scale": "block", "activations": "fp8_e4m3", "kv_cache": "fp8_e4m3",
       "kv_scales": "unit"}


class Watched:
    """A team with an approved config on a checkpoint (a planted budget, a passing check),
    an approver, a member and a read-write token."""

    def __init__(self, tmp_path, settings, budget: float = BUDGET):
        settings.OPDWEB_MODEL_ROOTS = [tmp_path / "models"]
        self.checkpoint = make_checkpoint(tmp_path / "models")
        self.team = TeamFactory()
        self.member = MembershipFactory(team=self.team, role=Role.MEMBER).user
        self.approver = MembershipFactory(team=self.team, role=Role.APPROVER).user
        self.budget = MismatchBudget.objects.create(
            team=self.team, checkpoint=self.checkpoint, checkpoint_hash=checkpoint_digest(self.checkpoint),
            task="arithmetic:3", method="opd", metric="k3", unit_engine="hf", reference_value=UNIT_K3,
            tolerance=1.4, curve=[], baseline={}, budget=budget, status="reached", rule="within 1.4 points")
        self.record, _ = do_create_config(team=self.team, user=self.member, name="fp8 w+kv", data=FP8)
        admission_job(self.team, self.checkpoint, FP8, self.budget)
        assert self.client(self.member).post(f"/configs/{self.record.pk}/request-approval/",
                                             {"checkpoint": self.checkpoint}).status_code == 302
        self.approval = ApprovalRequest.objects.get(config=self.record)
        assert self.client(self.approver).post(f"/approvals/{self.approval.pk}/decide/",
                                               {"decision": "approve", "comment": "ok"}).status_code == 302
        self.approval.refresh_from_db()
        assert self.approval.state == "approved" and self.approval.export_hashes
        self.tracking = Tracking(do_create_token(user=self.member, team=self.team, name="verl", can_write=True)[1])

    def client(self, user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    def start(self) -> str:
        return self.tracking.start_run(run_name="verl fp8",
                                       tags=[{"key": "opdweb.approval", "value": str(self.approval.pk)}])

    def log(self, run_id: str, step: int, values: dict):
        response = self.tracking.batch(run_id, [metric(k, v, step, 1_700_000_000_000 + step) for k, v in
                                                values.items()])
        assert response.status_code == 200, response.content


def verl_step(step: int, multiple: float, ess: float = 0.95) -> dict:
    """One step of verl's rollout-correction metrics as its MLflow logger sends them."""
    k3 = multiple * UNIT_K3
    return {"rollout_corr/k3_kl": k3, "rollout_corr/kl": k3 / 2, "rollout_corr/rollout_is_eff_sample_size": ess,
            "actor/pg_loss": 0.1 - step / 1e4, "timing_s/gen": 3.2}


def run_job(run_id: str) -> Job:
    return MlflowRun.objects.get(run_id=run_id).job


@pytest.mark.django_db(transaction=True)
def test_a_verl_stream_crossing_the_budget_sends_exactly_one_signed_alert_and_marks_the_approval(
        start_worker, receiver, tmp_path, settings):  # noqa: F811
    world = Watched(tmp_path, settings)
    hook = receiver()
    TeamWebhook.objects.create(team=world.team, url=hook.url, secret=SECRET)
    worker = start_worker(queues="cpu", WEBHOOK_ALLOWED_HOSTS=allowed_host(hook.url))
    run_id = world.start()
    for step in range(1, 61):  # above the budget from step 30 on, for good
        world.log(run_id, step, verl_step(step, 20.5 + step))
    job = run_job(run_id)

    # Alerts are raised, and their deliveries queued, while the points are logged: once every
    # delivery has gone, none more is coming (no pause that guesses how long a second takes).
    deliveries = WebhookDelivery.objects.filter(team=world.team)
    wait_for(lambda: deliveries.exists() and not deliveries.filter(state="pending").exists(), 300,
             "every alert delivered", interval=0.2, process=worker)
    assert list(deliveries.values_list("event", "state")) == [("run.alert", "delivered")]
    assert len(hook.received) == 1
    got = hook.received[0]
    expected = "sha256=" + hmac.new(SECRET.encode(), got["body"], hashlib.sha256).hexdigest()
    assert got["headers"]["X-Opdweb-Signature"] == expected and got["headers"]["X-Opdweb-Event"] == "run.alert"
    payload = json.loads(got["body"])
    assert (payload["rule"], payload["step"], payload["job"], payload["approval"]) == (
        "budget", CROSSING_STEP, job.pk, world.approval.pk)
    assert payload["threshold"] == BUDGET and payload["value"] == pytest.approx(20.5 + 32)  # raised at the 3rd step
    assert payload["unit_pair"] == "hf BF16 engine / fp32 trainer"  # the budget's: what both numbers are multiples of
    assert "BF16 (hf BF16 engine / fp32 trainer) since step" in payload["message"]

    alert = Alert.objects.get(job=job)
    assert (alert.kind, alert.step, alert.recovered_at) == ("budget", CROSSING_STEP, None)
    assert AuditEntry.objects.filter(team=world.team, action="run.alert", subject_id=job.pk).count() == 1
    world.approval.refresh_from_db()
    assert (world.approval.breached_at_step, world.approval.breached_by_id) == (CROSSING_STEP, job.pk)

    member = world.client(world.member)
    verl = member.post(f"/approvals/{world.approval.pk}/export/verl/")
    assert verl.status_code == 200, verl.content
    assert f"breached at step {CROSSING_STEP} (run #{job.pk})" in verl.content.decode().splitlines()[0]
    plain = member.post(f"/approvals/{world.approval.pk}/export/yaml/")
    assert plain.status_code == 200
    assert yaml.safe_load(plain.content)["opdweb"]["breached"] == f"breached at step {CROSSING_STEP} (run #{job.pk})"

    page = member.get(f"/approvals/{world.approval.pk}/").content.decode()
    assert f'data-job-id="{job.pk}" data-watch="breached"' in page and f"at step {CROSSING_STEP}" in page
    assert 'x BF16 at step 60 <span class="meta pair">(hf BF16 engine / fp32 trainer)</span>' in page  # its last
    assert 'id="breached"' in page
    run_page = member.get(f"/jobs/{job.pk}/").content.decode()
    assert f'data-alert-kind="budget" data-alert-step="{CROSSING_STEP}"' in run_page and 'id="recheck"' in run_page
    assert f'"breached_step": {CROSSING_STEP}' in run_page  # the chart's marker at the crossing
    assert "1 alert</a>" in member.get("/jobs/").content.decode()


@pytest.mark.django_db
def test_it_alerts_again_only_after_it_recovered(tmp_path, settings):
    world = Watched(tmp_path, settings)
    TeamWebhook.objects.create(team=world.team, url="https://hooks.example.com/opd", secret=SECRET)
    run_id = world.start()
    multiples = {1: 60, 2: 60, 3: 60, 4: 60, 5: 10, 6: 70, 7: 70, 8: 70}  # above 1-4, under at 5, above 6-8
    for step, multiple in multiples.items():
        world.log(run_id, step, verl_step(step, multiple))
    world.log(run_id, 3, verl_step(3, 60))  # a resent batch changes nothing
    alerts = list(Alert.objects.filter(job=run_job(run_id)).order_by("id").values_list("kind", "step"))
    assert alerts == [("budget", 1), ("budget", 6)]
    assert Alert.objects.filter(step=1).get().recovered_at is not None
    assert WebhookDelivery.objects.filter(event="run.alert").count() == 2
    world.approval.refresh_from_db()
    assert world.approval.breached_at_step == 1  # the first breach stays


@pytest.mark.django_db
def test_a_diverging_run_alerts_and_a_nan_neither_counts_nor_recovers(tmp_path, settings):
    world = Watched(tmp_path, settings)
    TeamWebhook.objects.create(team=world.team, url="https://hooks.example.com/opd", secret=SECRET)
    run_id = world.start()
    for step, k3 in enumerate([60 * UNIT_K3, "NaN", 60 * UNIT_K3, "Infinity", "NaN", 70 * UNIT_K3], start=1):
        world.log(run_id, step, {"rollout_corr/k3_kl": k3})
    alert = Alert.objects.get(job=run_job(run_id))
    assert (alert.kind, alert.step, alert.value) == ("budget", 1, float("inf"))  # 3rd step above: step 4
    assert WebhookDelivery.objects.get(event="run.alert").payload["value"] == "Infinity"


@pytest.mark.django_db
def test_fewer_steps_above_than_the_rule_asks_do_not_alert(tmp_path, settings):
    world = Watched(tmp_path, settings)
    WatchRule.objects.create(team=world.team, consecutive_steps=5)
    run_id = world.start()
    for step, multiple in enumerate([60, 60, 60, 60, 10, 60, 60], start=1):
        world.log(run_id, step, verl_step(step, multiple))
    assert not Alert.objects.exists()
    world.approval.refresh_from_db()
    assert world.approval.breached_at_step is None


@pytest.mark.django_db
def test_an_ess_below_the_floor_alerts_once_until_it_recovers(tmp_path, settings):
    world = Watched(tmp_path, settings)
    WatchRule.objects.create(team=world.team, ess_floor=0.5)
    run_id = world.start()
    for step, ess in enumerate([0.9, 0.4, 0.3, 0.8, 0.2], start=1):
        world.log(run_id, step, verl_step(step, 10, ess=ess))
    alerts = list(Alert.objects.filter(job=run_job(run_id)).order_by("id").values_list("kind", "step", "value"))
    assert alerts == [("ess", 2, 0.4), ("ess", 5, 0.2)]


@pytest.mark.django_db
def test_a_multiple_growing_faster_than_the_rate_alerts(tmp_path, settings):
    world = Watched(tmp_path, settings)
    job_rule = {"consecutive_steps": 3, "growth_per_1k_steps": 20.0}
    run_id = world.start()
    WatchRule.objects.create(team=world.team, job=run_job(run_id), **job_rule)  # the run's own rule
    # 10 per 1,000 steps up to step 500, then 40 per 1,000: the slope of the last ten points passes 20
    steps = list(range(100, 1001, 100)) + list(range(1100, 2001, 100))
    for step in steps:
        multiple = 5 + 0.01 * min(step, 1000) + 0.04 * max(step - 1000, 0)
        world.log(run_id, step, verl_step(step, multiple))
    alert = Alert.objects.get(job=run_job(run_id))
    # independently: numpy's least-squares fit of the last ten points, per 1,000 steps
    multiples = [5 + 0.01 * min(s, 1000) + 0.04 * max(s - 1000, 0) for s in steps]
    first = next(steps[i] for i in range(1, len(steps))
                 if 1000 * np.polyfit(steps[max(0, i - 9):i + 1], multiples[max(0, i - 9):i + 1], 1)[0] > 20)
    assert first == 1400
    assert (alert.kind, alert.step) == ("growth", 1400)


@pytest.mark.django_db
def test_a_silent_run_alerts_once_and_the_approval_page_says_silent(tmp_path, settings):
    world = Watched(tmp_path, settings)
    WatchRule.objects.create(team=world.team, silence_seconds=60)
    run_id = world.start()
    world.log(run_id, 1, verl_step(1, 10))
    job = run_job(run_id)
    assert do_check_silent_runs() == []  # it just logged
    later = timezone.now() + timedelta(seconds=61)
    assert do_check_silent_runs(now=later) == [job.pk]
    assert do_check_silent_runs(now=later + timedelta(seconds=60)) == []  # once
    page = world.client(world.member).get(f"/approvals/{world.approval.pk}/").content.decode()
    assert f'data-job-id="{job.pk}" data-watch="silent"' in page
    world.log(run_id, 2, verl_step(2, 10))  # it speaks again: recovered
    assert Alert.objects.get(job=job, kind="silence").recovered_at is not None
    page = world.client(world.member).get(f"/approvals/{world.approval.pk}/").content.decode()
    assert f'data-job-id="{job.pk}" data-watch="within"' in page


@pytest.mark.django_db
def test_the_recheck_button_submits_an_admission_job_on_the_runs_latest_checkpoint(tmp_path, settings):
    world = Watched(tmp_path, settings)
    later = make_checkpoint(tmp_path / "models", "student-step-400")
    at_400 = MismatchBudget.objects.create(  # the same lineage, calibrated on the later checkpoint
        team=world.team, checkpoint=later, checkpoint_hash=checkpoint_digest(later), task="arithmetic:3",
        method="opd", metric="k3", unit_engine="hf", reference_value=UNIT_K3, step=400, tolerance=1.4, curve=[],
        baseline={}, budget=40.0, status="reached", rule="within 1.4 points")
    run_id = world.start()
    world.tracking.post("runs/set-tag", {"run_id": run_id, "key": "opdweb.latest_checkpoint", "value": later})
    job = run_job(run_id)
    before = set(Job.objects.filter(kind="admission").values_list("pk", flat=True))
    response = world.client(world.member).post(f"/runs/{job.pk}/recheck/")
    assert response.status_code == 302, response.content
    assert response["Location"] != f"/jobs/{job.pk}/", [str(m) for m in response.wsgi_request._messages]
    made = Job.objects.filter(kind="admission").exclude(pk__in=before).get()
    assert made.config["model"] == later and made.config["rollout"] == world.record.config
    assert made.config["budget"]["id"] == at_400.pk and made.state == "queued"
    assert response["Location"] == f"/jobs/{made.pk}/"
    assert AuditEntry.objects.filter(action="run.rechecked", subject_id=job.pk).count() == 1
    assert world.client(world.member).get(f"/runs/{job.pk}/recheck/").status_code == 405


@pytest.mark.django_db
def test_the_budget_between_calibrated_steps_is_the_straight_line_held_flat_outside(tmp_path, settings):
    team = TeamFactory()

    def budget(step, value, method="opd"):
        return MismatchBudget.objects.create(
            team=team, checkpoint=f"/models/s{step}", task="arithmetic:3", method=method, metric="k3",
            unit_engine="hf", step=step, tolerance=1.4, curve=[], baseline={}, budget=value, status="reached",
            rule="r")

    linked = budget(1000, 30.0)
    budget(0, 50.0)
    budget(500, 99.0, method="grpo")  # another method: not the same lineage
    points = budget_points(linked)
    assert points == [(0, 50.0), (1000, 30.0)]
    # log-linear between the bracketing steps, by hand: 50 * (30/50)^(s/1000)
    assert [budget_at(points, s) for s in (0, 250, 500, 1000, 5000)] == pytest.approx(
        [50.0, 50 * 0.6 ** 0.25, (50 * 30) ** 0.5, 30.0, 30.0])
    assert budget_at([(200, 12.0)], 10) == budget_at([(200, 12.0)], 900) == 12.0


@pytest.mark.django_db
def test_a_team_admin_sets_the_watch_rule_and_others_may_only_read_it(tmp_path, settings):
    world = Watched(tmp_path, settings)
    admin = MembershipFactory(team=world.team, role=Role.ADMIN).user
    url = f"/runs/watch/{world.team.slug}/"
    assert b'name="consecutive_steps" value="3"' in world.client(world.member).get(url).content  # the defaults
    assert world.client(world.member).post(url, {"consecutive_steps": "1"}).status_code == 403
    refused = world.client(admin).post(url, {"consecutive_steps": "0", "ess_floor": "low"})
    assert refused.status_code == 400 and not WatchRule.objects.exists()
    saved = world.client(admin).post(url, {"consecutive_steps": "2", "ess_floor": "0.5", "silence_seconds": ""})
    assert saved.status_code == 302
    rule = WatchRule.objects.get(team=world.team, job=None)
    assert (rule.consecutive_steps, rule.ess_floor, rule.silence_seconds, rule.growth_per_1k_steps) == (2, 0.5,
                                                                                                       None, None)
    assert AuditEntry.objects.filter(team=world.team, action="watch.rule_changed").count() == 1
    run_id = world.start()  # the saved rule watches: two steps above alert
    for step in (1, 2):
        world.log(run_id, step, verl_step(step, 60))
    assert Alert.objects.get(job=run_job(run_id)).step == 1


@pytest.mark.django_db
def test_a_member_sets_a_runs_own_rule_on_its_page_and_clears_it(tmp_path, settings):
    world = Watched(tmp_path, settings)
    WatchRule.objects.create(team=world.team, consecutive_steps=5)  # the team's: five steps in a row
    run_id = world.start()
    job = run_job(run_id)
    member, url = world.client(world.member), f"/runs/{job.pk}/watch/"
    page = member.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="run-watch-form"' in page and "The team's rule" in page and 'value="5"' in page

    # A refusal redraws the run page under 400 with what was typed, and saves nothing.
    refused = member.post(url, {"consecutive_steps": "0", "ess_floor": "low"}, HTTP_REFERER=f"http://testserver/jobs/{job.pk}/")
    assert refused.status_code == 400 and not WatchRule.objects.filter(job=job).exists()
    body = refused.content.decode()
    assert 'id="run-watch-form"' in body and 'name="ess_floor" inputmode="decimal" value="low"' in body
    assert "consecutive_steps: must be from 1 to 100000" in body

    assert member.post(url, {"consecutive_steps": "2", "ess_floor": "", "silence_seconds": "60"}).status_code == 302
    own = WatchRule.objects.get(job=job)
    assert (own.team_id, own.consecutive_steps, own.ess_floor, own.silence_seconds) == (world.team.pk, 2, None, 60)
    assert WatchRule.objects.get(team=world.team, job=None).consecutive_steps == 5  # the team's is untouched
    entry = AuditEntry.objects.get(action="watch.rule_changed", subject="job", subject_id=job.pk)
    assert entry.actor == world.member and "consecutive_steps 2" in entry.summary
    assert "This run's own rule" in member.get(f"/jobs/{job.pk}/").content.decode()

    for step in (1, 2):  # two steps above alert under the run's rule (the team's asks for five)
        world.log(run_id, step, verl_step(step, 60))
    assert Alert.objects.get(job=job).step == 1

    clear = f"/runs/{job.pk}/watch/clear/"
    assert member.post(clear).status_code == 302 and not WatchRule.objects.filter(job=job).exists()
    assert member.post(clear).status_code == 409  # nothing of its own left to clear
    assert AuditEntry.objects.filter(action="watch.rule_changed", subject_id=job.pk).count() == 2


@pytest.mark.django_db
def test_a_runs_rule_is_refused_to_viewers_other_teams_and_jobs_that_are_not_runs(tmp_path, settings):
    world = Watched(tmp_path, settings)
    job = run_job(world.start())
    viewer = MembershipFactory(team=world.team, role=Role.VIEWER).user
    stranger = MembershipFactory(role=Role.ADMIN).user
    rule = {"consecutive_steps": "2"}
    assert world.client(viewer).post(f"/runs/{job.pk}/watch/", rule).status_code == 403
    assert world.client(stranger).post(f"/runs/{job.pk}/watch/", rule).status_code == 404
    assert world.client(world.member).get(f"/runs/{job.pk}/watch/").status_code == 405
    admission = Job.objects.filter(team=world.team, kind="admission").first()
    refused = world.client(world.member).post(f"/runs/{admission.pk}/watch/", rule)
    assert refused.status_code == 400 and b"only external runs are watched" in refused.content
    assert not WatchRule.objects.exists()


@pytest.mark.django_db
def test_a_checkpoint_the_run_uploaded_is_rechecked_from_the_store(tmp_path, settings, s3_bucket):
    """No shared disk: the cluster run uploads its step-400 checkpoint with the artifact API
    (into S3) and tags it by its ``mlflow-artifacts:`` URI; the re-check is an admission job
    on the store's ``s3://`` URI, which a worker fetches."""
    from workers.science.checkpoints.stores import store_at

    world = Watched(tmp_path, settings)
    settings.OPDWEB_ARTIFACT_ROOT = f"s3://{s3_bucket}/runs"
    settings.OPDWEB_CHECKPOINT_URIS = [f"s3://{s3_bucket}/runs/"]
    run_id = world.start()
    info = world.tracking.get("runs/get", run_id=run_id).json()["run"]["info"]
    upload = make_checkpoint(tmp_path / "trainer", "step-400")
    for f in sorted(Path(upload).iterdir()):
        response = world.tracking.client.put(
            f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{info['experiment_id']}/{run_id}/artifacts/ckpt/step-400/"
            f"{f.name}", data=f.read_bytes(), content_type="application/octet-stream",
            HTTP_AUTHORIZATION=f"Bearer {world.tracking.secret}")
        assert response.status_code == 200, response.content
    stored = f"s3://{s3_bucket}/runs/{info['experiment_id']}/{run_id}/artifacts/ckpt/step-400"
    assert {f.key for f in store_at(stored).list()} == {"config.json", "model.safetensors"}
    at_400 = MismatchBudget.objects.create(  # the lineage's budget, calibrated on the uploaded checkpoint
        team=world.team, checkpoint=stored, checkpoint_hash=checkpoint_digest(upload), task="arithmetic:3",
        method="opd", metric="k3", unit_engine="hf", reference_value=UNIT_K3, step=400, tolerance=1.4, curve=[],
        baseline={}, budget=40.0, status="reached", rule="within 1.4 points")
    world.tracking.post("runs/set-tag", {"run_id": run_id, "key": "opdweb.latest_checkpoint",
                                         "value": f"{info['artifact_uri']}/ckpt/step-400"})
    job = run_job(run_id)
    response = world.client(world.member).post(f"/runs/{job.pk}/recheck/")
    made = Job.objects.filter(kind="admission", name__startswith="re-check").get()
    assert response["Location"] == f"/jobs/{made.pk}/"
    assert made.config["model"] == stored and made.config["budget"]["id"] == at_400.pk

    # Another run's files are not this run's checkpoint: refused, nothing submitted.
    world.tracking.post("runs/set-tag", {"run_id": run_id, "key": "opdweb.latest_checkpoint",
                                         "value": f"mlflow-artifacts:/{info['experiment_id']}/{'0' * 32}/artifacts/x"})
    response = world.client(world.member).post(f"/runs/{job.pk}/recheck/")
    assert response.status_code in (302, 400) and Job.objects.filter(name__startswith="re-check").count() == 1


@pytest.mark.django_db
def test_the_watch_reads_the_budget_at_the_optimizer_step_of_each_logged_step(tmp_path, settings):
    """Budgets over training are calibrated at optimizer steps: 10x at step 0 and 1,000x at step
    1,000 give 10 * 100^(s / 1000) by hand.  A run logging 150x is under the budget at logged
    steps 250 and 300 with 4 updates per logged step (optimizer steps 1,000 and 1,200:
    1,000x), and above it once its rule says 1 update per step (step 301: 39.9x)."""
    from opdweb.runs.metric_map import MULTIPLE_KEY
    from opdweb.runs.templatetags.run_links import run_link_of

    world = Watched(tmp_path, settings, budget=10.0)
    MismatchBudget.objects.create(
        team=world.team, checkpoint=world.checkpoint, task="arithmetic:3", method="opd", metric="k3",
        unit_engine="hf", reference_value=UNIT_K3, tolerance=1.4, curve=[], baseline={}, budget=1000.0,
        status="reached", rule="within 1.4 points", step=1000)
    WatchRule.objects.create(team=world.team, consecutive_steps=1, updates_per_step=4)
    run_id = world.start()
    job = run_job(run_id)
    for step in (250, 300):
        world.log(run_id, step, verl_step(step, 150.0))
    assert not Alert.objects.filter(job=job).exists()
    guide = run_link_of(job)["chart_guides"][MULTIPLE_KEY]
    assert guide["points"] == [(0.0, 10.0), (250.0, 1000.0)] and "(4 updates per step)" in guide["label"]

    assert world.client(world.member).post(f"/runs/{job.pk}/watch/", {"consecutive_steps": "1",
                                                                     "updates_per_step": "1"}).status_code == 302
    world.log(run_id, 301, verl_step(301, 150.0))
    alert = Alert.objects.get(job=job)
    assert alert.step == 301 and alert.threshold == pytest.approx(10 * 100 ** 0.301)
    assert "optimizer steps" not in alert.message
    refused = world.client(world.member).post(f"/runs/{job.pk}/watch/", {"consecutive_steps": "1",
                                                                         "updates_per_step": "0"})
    assert refused.status_code == 400 and b"updates_per_step: must be from 1 to 1000000" in refused.content


@pytest.mark.django_db
def test_an_alert_names_the_optimizer_step_of_its_logged_step(tmp_path, settings):
    world = Watched(tmp_path, settings)  # one budget, 50x at every step
    WatchRule.objects.create(team=world.team, consecutive_steps=1, updates_per_step=8)
    run_id = world.start()
    world.log(run_id, 12, verl_step(12, 60.0))
    alert = Alert.objects.get(job=run_job(run_id))
    assert "since step 12 (= 96 optimizer steps at 8 updates per step)" in alert.message
