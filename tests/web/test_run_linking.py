"""Linking a cluster run to its approved config, and its mismatch on the budget's scale:
the opdweb.* tags resolve to the team's approval and budget (another team's, an unknown or
an unapproved one is refused in MLflow's shape, nothing written); an exact k3 becomes a
multiple of the checkpoint's BF16 unit, by hand-computed ratios; the page draws the budget
line; the metric table names what the trainers' sources log."""
import json
import math
import re

import pytest
from django.test import Client
from django.utils import timezone

from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.models import Job
from opdweb.rollouts.actions import do_create_config
from opdweb.runs.metric_map import BY_KEY, EXACT_K3_KEYS, MULTIPLE_KEY
from opdweb.runs.models import MlflowRun, RunLink
from opdweb.teams.models import AuditEntry
from opdweb.tokens.actions import do_create_token
from tests.web.factories import MembershipFactory
from tests.web.test_mlflow_endpoints import Tracking, assert_refused, metric, points

pytestmark = pytest.mark.django_db

CHECKPOINT = "/models/student-7b"
UNIT_K3 = 0.002  # the BF16 unit's k3 on the checkpoint, as the calibration measured it
BUDGET = 50.0


def approve(team, user, *, name="fp8 kv", data=None, checkpoint=CHECKPOINT, unit_k3=UNIT_K3, budget=BUDGET,
            state=ApprovalState.APPROVED) -> ApprovalRequest:
    record, _ = do_create_config(team=team, user=user, name=name, data=data or {"kv_cache": "fp8_e4m3"})
    mismatch_budget = MismatchBudget.objects.create(
        team=team, checkpoint=checkpoint, task="arithmetic:3", method="opd", metric="k3", unit_engine="vllm",
        unit_trainer="bf16", reference_value=unit_k3, tolerance=1.4, curve=[], baseline={}, budget=budget,
        status="reached", rule="within 1.4 points of BF16")
    return ApprovalRequest.objects.create(team=team, config=record, checkpoint=checkpoint, requested_by=user,
                                          state=state, decided_at=timezone.now(), budget=mismatch_budget)


@pytest.fixture
def world(member):
    user, team = member
    return user, team, Tracking(do_create_token(user=user, team=team, name="trainer", can_write=True)[1])


def tags(**pairs) -> list[dict]:
    return [{"key": k.replace("_", ".", 1), "value": v} for k, v in pairs.items()]


def link_of(run_id: str) -> RunLink | None:
    return RunLink.objects.filter(job__mlflow_run__run_id=run_id).first()


def test_it_links_a_run_by_the_config_hash_and_checkpoint_to_the_teams_approval_and_budget(world):
    user, team, tracking = world
    approval = approve(team, user)
    other = approve(team, user, name="bf16", data={}, checkpoint="/models/other")
    run_id = tracking.start_run(tags=tags(opdweb_config_hash=approval.config.config_hash,
                                          opdweb_checkpoint=CHECKPOINT))
    link = link_of(run_id)
    assert (link.approval_id, link.budget_id, link.checkpoint) == (approval.pk, approval.budget_id, CHECKPOINT)
    assert link.approval_id != other.pk and link.unit_k3 == UNIT_K3
    assert AuditEntry.objects.filter(action="run.linked", subject_id=link.job_id).count() == 1


def test_it_links_by_the_approval_number_an_export_prints_or_a_12_digit_hash_prefix(world):
    user, team, tracking = world
    approval = approve(team, user)
    assert link_of(tracking.start_run(tags=tags(opdweb_approval=f"#{approval.pk}"))).approval_id == approval.pk
    prefix = approval.config.config_hash[:12]
    assert link_of(tracking.start_run(tags=tags(opdweb_config_hash=prefix))).approval_id == approval.pk


def test_another_teams_hash_is_refused_as_unknown_and_no_run_is_made(world):
    user, team, tracking = world
    theirs = MembershipFactory()
    approval = approve(theirs.team, theirs.user)
    for named in (tags(opdweb_config_hash=approval.config.config_hash), tags(opdweb_approval=str(approval.pk)),
                  tags(opdweb_config_hash="0" * 64)):
        response = tracking.post("runs/create", {"experiment_id": "0", "tags": named})
        assert_refused(response, 400, "INVALID_PARAMETER_VALUE", f"in team {team.slug}")
        assert "nothing was written" in response.json()["message"]
    assert not Job.objects.filter(team=team).exists() and not RunLink.objects.exists()


def test_an_unapproved_config_or_another_checkpoint_is_refused_with_the_reason(world):
    user, team, tracking = world
    pending = approve(team, user, state=ApprovalState.PENDING)
    assert_refused(tracking.post("runs/create", {"experiment_id": "0", "tags": tags(opdweb_approval=str(pending.pk))}),
                   400, "INVALID_PARAMETER_VALUE", "is pending, not approved")
    approved = approve(team, user, name="other", data={"kv_cache": "fp8_e5m2"})
    response = tracking.post("runs/create", {"experiment_id": "0", "tags": tags(
        opdweb_approval=str(approved.pk), opdweb_checkpoint="/models/elsewhere")})
    assert_refused(response, 400, "INVALID_PARAMETER_VALUE", "is not the checkpoint")
    assert_refused(tracking.post("runs/create", {"experiment_id": "0", "tags": tags(opdweb_checkpoint=CHECKPOINT)}),
                   400, "INVALID_PARAMETER_VALUE", "name the config too")
    assert not Job.objects.filter(team=team).exists()


def test_a_set_tag_links_later_converts_earlier_points_and_another_approval_is_refused(world):
    user, team, tracking = world
    approval, second = approve(team, user), approve(team, user, name="b", data={"kv_cache": "fp8_e5m2"})
    run_id = tracking.start_run(run_name="verl")
    assert tracking.batch(run_id, metrics=[metric("rollout_corr/k3_kl", 0.01, 1)]).status_code == 200
    set_tag = tracking.post("runs/set-tag", {"run_id": run_id, "key": "opdweb.approval", "value": str(approval.pk)})
    assert set_tag.status_code == 200, set_tag.content
    assert (MULTIPLE_KEY, 1, pytest.approx(5.0)) in points(run_id)  # 0.01 / 0.002
    response = tracking.post("runs/set-tag", {"run_id": run_id, "key": "opdweb.approval", "value": str(second.pk)})
    assert_refused(response, 400, "INVALID_PARAMETER_VALUE", f"linked to approval #{approval.pk}")
    assert link_of(run_id).approval_id == approval.pk


def test_the_multiple_is_the_hand_computed_k3_over_the_units_k3(world):
    user, team, tracking = world
    approval = approve(team, user)
    run_id = tracking.start_run(tags=tags(opdweb_approval=str(approval.pk)))
    # Per-token log-ratios of a step, l = log p_train - log p_rollout; k3 = mean(e^l - 1 - l).
    logs = [0.1, -0.2, 0.05, 0.0]
    k3 = sum(math.exp(x) - 1 - x for x in logs) / len(logs)  # 0.00789...
    k1 = sum(-x for x in logs) / len(logs)
    response = tracking.batch(run_id, metrics=[metric("rollout_corr/k3_kl", k3, 10), metric("rollout_corr/kl", k1, 10),
                                               metric("rollout_corr/k3_kl", 0.11, 20),
                                               metric("train/token_mult_prob_error", 1.02, 10)])
    assert response.status_code == 200, response.content
    derived = {step: value for key, step, value in points(run_id) if key == MULTIPLE_KEY}
    assert derived == {10: pytest.approx(k3 / UNIT_K3), 20: pytest.approx(55.0)}
    assert derived[20] > BUDGET  # 0.11 / 0.002: past the budget line at step 20
    assert tracking.batch(run_id, metrics=[metric("rollout_corr/k3_kl", k3, 10)]).status_code == 200  # resent
    assert len([p for p in points(run_id) if p[0] == MULTIPLE_KEY]) == 2


def test_the_product_keys_are_its_own_and_a_trainer_cannot_log_them(world):
    user, team, tracking = world
    run_id = tracking.start_run()
    assert_refused(tracking.batch(run_id, metrics=[metric(MULTIPLE_KEY, 1.0, 1)]), 400, "INVALID_PARAMETER_VALUE",
                   "the product's own")
    assert points(run_id) == []


def test_the_run_page_draws_the_multiple_against_the_budget_line_and_labels_other_metrics(world):
    user, team, tracking = world
    approval = approve(team, user)
    run_id = tracking.start_run(tags=tags(opdweb_approval=str(approval.pk)))
    tracking.batch(run_id, metrics=[metric("rollout_corr/k3_kl", 0.004, 1),
                                    metric("train/train_rollout_logprob_abs_diff", 0.03, 1)])
    client = Client()
    client.force_login(user)
    page = client.get(f"/jobs/{MlflowRun.objects.get(run_id=run_id).job_id}/").content.decode()
    guides = json.loads(re.search(r'<script id="chart-guides" type="application/json">(.*?)</script>', page,
                                  re.S).group(1))
    assert guides[MULTIPLE_KEY]["y"] == BUDGET and "budget 50x BF16" in guides[MULTIPLE_KEY]["label"]
    assert "not comparable" in guides["train/train_rollout_logprob_abs_diff"]["note"]
    assert f"approval #{approval.pk}" in page and 'id="run-budget"' in page and "50x BF16" in page


def test_the_native_client_links_by_approval_or_hash():
    from opdweb_client.run import link_tags

    assert link_tags(12, "/m") == {"opdweb.approval": "12", "opdweb.checkpoint": "/m"}
    assert link_tags("#12", None) == {"opdweb.approval": "#12"}
    assert link_tags("ab" * 32, None) == {"opdweb.config_hash": "ab" * 32}


def test_the_metric_table_names_what_each_trainers_source_logs():
    exact = {key: (m.metric, m.exact) for key, m in BY_KEY.items()}
    assert exact["rollout_corr/k3_kl"] == ("k3", True) and exact["rollout_corr/kl"] == ("k1", True)
    assert exact["rollout_corr/rollout_is_eff_sample_size"] == ("ess", True)
    assert exact["mismatch_kl/all/mean"] == ("k3", True)  # prime-rl: ratio - log ratio - 1
    assert exact["train/gen_kl_error"] == ("k3", True)  # NeMo-RL with its default kl_type k3
    assert exact["train/token_mult_prob_error"][1] is False  # mean exp(|d|)
    assert exact["train/train_rollout_logprob_abs_diff"][1] is False  # slime: mean |d|
    assert exact["sampling/sampling_logp_difference/mean"][1] is False  # TRL: mean |d|
    assert EXACT_K3_KEYS == ("rollout_corr/k3_kl", "mismatch_kl/all/mean", "train/gen_kl_error")
